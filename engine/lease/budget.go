package lease

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// HostDevice is the device name of host memory.
const HostDevice = "host"

// HostBudget is the default budget of the host device: total memory (MemTotal of
// /proc/meminfo) minus margin; margin 0 means max(10% of the total, 512 MiB). Off
// Linux it fails, and the caller must configure a budget (the Block's MemoryBudget).
func HostBudget(margin int64) (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("lease: host memory unknown, configure a memory budget: %w", err)
	}
	defer f.Close()
	total, err := memTotal(f)
	if err != nil {
		return 0, err
	}
	return budgetOf(total, margin)
}

func budgetOf(total, margin int64) (int64, error) {
	if margin == 0 {
		margin = max(total/10, 512<<20)
	}
	if margin < 0 || total <= margin {
		return 0, fmt.Errorf("lease: host memory %d bytes leaves nothing after a margin of %d", total, margin)
	}
	return total - margin, nil
}

// memTotal reads MemTotal (in bytes) from the text of /proc/meminfo.
func memTotal(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != "MemTotal" {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 || len(fields) > 2 || len(fields) == 2 && fields[1] != "kB" {
			return 0, fmt.Errorf("lease: bad MemTotal line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb <= 0 || kb > 1<<53>>10 {
			return 0, fmt.Errorf("lease: bad MemTotal line %q", sc.Text())
		}
		if len(fields) == 1 { // no unit: bytes
			return kb, nil
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("lease: reading meminfo: %w", err)
	}
	return 0, fmt.Errorf("lease: no MemTotal in meminfo")
}
