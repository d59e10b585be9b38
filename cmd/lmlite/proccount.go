package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procCounts are a process's scheduling and system-call counters, summed over its
// live threads (Linux /proc; zero elsewhere): what `bench --engine` reports per
// decode step, so that a change to the worker hop shows its mechanism (wake-ups,
// writes), not only its speed.
type procCounts struct {
	Voluntary, Involuntary uint64 // context switches: the thread blocked / was preempted
	Reads, Writes          uint64 // read and write system calls (syscr, syscw)
	CPU                    uint64 // user and system time, in clock ticks (1/100 s)
}

func (a procCounts) sub(b procCounts) procCounts {
	return procCounts{a.Voluntary - b.Voluntary, a.Involuntary - b.Involuntary, a.Reads - b.Reads, a.Writes - b.Writes, a.CPU - b.CPU}
}

// readProcCounts reads pid's counters; a missing file counts zero.
func readProcCounts(pid int) procCounts {
	var c procCounts
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	tasks, _ := filepath.Glob(filepath.Join(dir, "task", "*", "status"))
	for _, t := range tasks {
		scanFields(t, ":", func(k, v string) {
			switch k {
			case "voluntary_ctxt_switches":
				c.Voluntary += parseU(v)
			case "nonvoluntary_ctxt_switches":
				c.Involuntary += parseU(v)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil {
		// utime and stime are fields 14 and 15; the command name (field 2) may hold
		// spaces, so count from the parenthesis that ends it.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
			if f := strings.Fields(string(b[i+1:])); len(f) > 13 {
				c.CPU = parseU(f[11]) + parseU(f[12])
			}
		}
	}
	scanFields(filepath.Join(dir, "io"), ":", func(k, v string) {
		switch k {
		case "syscr":
			c.Reads = parseU(v)
		case "syscw":
			c.Writes = parseU(v)
		}
	})
	return c
}

func scanFields(path, sep string, f func(k, v string)) {
	fh, err := os.Open(path)
	if err != nil {
		return
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), sep); ok {
			f(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
}

func parseU(s string) uint64 {
	n, _ := strconv.ParseUint(strings.Fields(s + " 0")[0], 10, 64)
	return n
}
