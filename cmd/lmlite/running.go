package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// A running `lmlite serve` leaves a note in the run directory saying where it
// listens and which data directory (hence which store) it holds, so that `lmlite
// keys` finds the store of the server that is actually running instead of guessing
// from the current directory.

// runningServer is the note of one running server.
type runningServer struct {
	PID     int    `json:"pid"`
	Listen  string `json:"listen"`   // the address it listens on
	DataDir string `json:"data_dir"` // absolute
	Config  string `json:"config"`   // absolute; "": the embedded demo config
}

// runDir is where the notes live: $LMLITE_RUN_DIR, else $XDG_RUNTIME_DIR/lmlite, else
// a per-user directory under the system's temporary directory.
func runDir() string {
	if d := os.Getenv("LMLITE_RUN_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "lmlite")
	}
	return filepath.Join(os.TempDir(), "lmlite-"+strconv.Itoa(os.Getuid()))
}

// announce writes this process's note and returns the function that removes it.
func announce(s runningServer) (remove func(), err error) {
	dir := runDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s.PID = os.Getpid()
	var absErr error
	if s.DataDir, absErr = filepath.Abs(s.DataDir); absErr != nil {
		return nil, absErr
	}
	if s.Config != "" {
		if s.Config, absErr = filepath.Abs(s.Config); absErr != nil {
			return nil, absErr
		}
	}
	b, _ := json.Marshal(s)
	path := filepath.Join(dir, "serve-"+strconv.Itoa(s.PID)+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	return func() { os.Remove(path) }, nil
}

// runningServers lists the notes of servers that are still alive (stale notes of
// servers that died are removed).
func runningServers() []runningServer {
	paths, _ := filepath.Glob(filepath.Join(runDir(), "serve-*.json"))
	var out []runningServer
	for _, p := range paths {
		var s runningServer
		b, err := os.ReadFile(p)
		if err != nil || json.Unmarshal(b, &s) != nil || s.PID <= 0 {
			continue
		}
		if !alive(s.PID) {
			os.Remove(p)
			continue
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// pickServer chooses the running server whose store `lmlite keys` uses when neither
// --config nor --server is given: the only one, or the one whose data directory is
// dataDir when several run. ok is false when none runs.
func pickServer(servers []runningServer, dataDir string) (s runningServer, ok bool, err error) {
	switch len(servers) {
	case 0:
		return runningServer{}, false, nil
	case 1:
		return servers[0], true, nil
	}
	abs, _ := filepath.Abs(dataDir)
	var list []string
	for _, s := range servers {
		if s.DataDir == abs {
			return s, true, nil
		}
		list = append(list, fmt.Sprintf("pid %d on %s (data %s)", s.PID, s.Listen, s.DataDir))
	}
	return runningServer{}, false, fmt.Errorf("%d lmlite servers are running: %s; say which with --config or --server", len(servers), strings.Join(list, "; "))
}
