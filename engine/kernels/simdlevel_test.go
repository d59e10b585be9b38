package kernels

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
)

// simdLevel is an assembly level some tests need: whether its kernels are on
// (the package's variables) and which of its CPU features golang.org/x/sys/cpu
// does not report. simdLevelTable (simdlevel_amd64_test.go, or empty without the
// assembly) lists them.
type simdLevel struct {
	name    string
	on      func() bool
	missing func() []string
}

// simdRuns records, per level, the tests that ran its kernels and those that
// skipped; TestMain checks them after the run.
var simdRuns = struct {
	sync.Mutex
	ran, skipped map[string][]string
}{ran: map[string][]string{}, skipped: map[string][]string{}}

// requireSIMD runs the rest of t only where the named level's kernels are on, and
// says so: "avx2 ran", or "avx512 skipped: CPU lacks avx512f avx512vnni".
func requireSIMD(t *testing.T, name string) {
	t.Helper()
	l, ok := findSIMDLevel(name)
	simdRuns.Lock()
	defer simdRuns.Unlock()
	switch {
	case ok && l.on():
		simdRuns.ran[name] = append(simdRuns.ran[name], t.Name())
		t.Logf("%s ran", name)
	case ok:
		simdRuns.skipped[name] = append(simdRuns.skipped[name], t.Name())
		if miss := l.missing(); len(miss) > 0 {
			t.Skipf("%s skipped: CPU lacks %s", name, strings.Join(miss, " "))
		}
		t.Skipf("%s skipped: its kernels are off though the CPU has it (TestMain fails the run)", name)
	default:
		t.Skipf("%s skipped: no assembly in this build", name)
	}
}

func findSIMDLevel(name string) (simdLevel, bool) {
	for _, l := range simdLevelTable {
		if l.name == name {
			return l, true
		}
	}
	return simdLevel{}, false
}

// simdLevelFailures is what TestMain fails on: a level the CPU has (no feature
// missing) whose tests skipped, or, when every test ran (no -run or -skip), none
// of whose tests ran.
func simdLevelFailures(levels []simdLevel, ran, skipped map[string][]string, filtered bool) []string {
	var bad []string
	for _, l := range levels {
		if len(l.missing()) > 0 {
			continue
		}
		if s := skipped[l.name]; len(s) > 0 {
			sort.Strings(s)
			bad = append(bad, fmt.Sprintf("the CPU has %s but these tests skipped it: %s", l.name, strings.Join(s, " ")))
		}
		if !filtered && len(ran[l.name]) == 0 {
			bad = append(bad, fmt.Sprintf("the CPU has %s but no test ran its kernels", l.name))
		}
	}
	return bad
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	filtered := flag.Lookup("test.run").Value.String() != "" || flag.Lookup("test.skip").Value.String() != ""
	simdRuns.Lock()
	for _, l := range simdLevelTable {
		if n := len(simdRuns.ran[l.name]); n > 0 {
			fmt.Printf("kernels: %s ran (%d tests)\n", l.name, n)
		} else if miss := l.missing(); len(miss) > 0 {
			fmt.Printf("kernels: %s skipped: CPU lacks %s\n", l.name, strings.Join(miss, " "))
		}
	}
	bad := simdLevelFailures(simdLevelTable, simdRuns.ran, simdRuns.skipped, filtered)
	simdRuns.Unlock()
	for _, b := range bad {
		fmt.Fprintln(os.Stderr, "FAIL: kernels:", b)
	}
	if code == 0 && len(bad) > 0 {
		code = 1
	}
	os.Exit(code)
}

// TestSIMDLevelFailures: TestMain's check fails a run where the CPU has a level
// whose tests skipped, or (unfiltered) where none ran, and passes levels the CPU
// lacks and filtered runs that did not reach a level.
func TestSIMDLevelFailures(t *testing.T) {
	has := simdLevel{name: "has", missing: func() []string { return nil }}
	lacks := simdLevel{name: "lacks", missing: func() []string { return []string{"avx512f"} }}
	levels := []simdLevel{has, lacks}
	for _, c := range []struct {
		name        string
		ran, skip   map[string][]string
		filtered    bool
		wantFailure bool
	}{
		{"ran, none skipped", map[string][]string{"has": {"TestA"}}, nil, false, false},
		{"ran and skipped", map[string][]string{"has": {"TestA"}}, map[string][]string{"has": {"TestB"}}, false, true},
		{"skipped, filtered run", nil, map[string][]string{"has": {"TestB"}}, true, true},
		{"none ran, unfiltered", nil, nil, false, true},
		{"none ran, filtered", nil, nil, true, false},
		{"lacking level skipped", map[string][]string{"has": {"TestA"}}, map[string][]string{"lacks": {"TestB"}}, false, false},
	} {
		bad := simdLevelFailures(levels, c.ran, c.skip, c.filtered)
		if (len(bad) > 0) != c.wantFailure {
			t.Errorf("%s: failures %q, want failure %v", c.name, bad, c.wantFailure)
		}
	}
}
