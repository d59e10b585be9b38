package worker

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Pid files: DataDir/workers/GROUP.pid holds "PID RUNID" of the group's worker. A
// file whose run is not this Pool's is stale: its worker is killed if it still runs
// and is still that worker (its command line carries the run id, so a reused pid is
// never killed).

func (p *Pool) pidDir() string {
	if p.cfg.DataDir == "" {
		return ""
	}
	return filepath.Join(p.cfg.DataDir, "workers")
}

func (p *Pool) pidPath(group string) string {
	return filepath.Join(p.pidDir(), url.PathEscape(group)+".pid")
}

func (p *Pool) writePID(group string, pid int) {
	dir := p.pidDir()
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		p.log.Warn("worker pid file", "err", err)
		return
	}
	if err := os.WriteFile(p.pidPath(group), fmt.Appendf(nil, "%d %s\n", pid, p.runID), 0o600); err != nil {
		p.log.Warn("worker pid file", "err", err)
	}
}

// removePID removes the group's pid file if it still names pid.
func (p *Pool) removePID(group string, pid int) {
	if p.pidDir() == "" {
		return
	}
	path := p.pidPath(group)
	if b, err := os.ReadFile(path); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 && f[0] == strconv.Itoa(pid) && f[1] == p.runID {
			os.Remove(path)
		}
	}
}

// killStale kills the live workers of other runs and removes their pid files.
func (p *Pool) killStale() {
	dir := p.pidDir()
	if dir == "" {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".pid") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) != 2 || f[1] == p.runID {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err == nil && pid > 1 && isWorkerOf(pid, f[1]) {
			p.log.Warn("killing a stale worker of an earlier run", "pid", pid, "pid_file", path)
			syscall.Kill(pid, syscall.SIGKILL)
		}
		os.Remove(path)
	}
}

// isWorkerOf reports whether process pid is a worker of run runID: its command line
// holds "--run-id RUNID".
func isWorkerOf(pid int, runID string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte("\x00--run-id\x00"+runID+"\x00"))
}
