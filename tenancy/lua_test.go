package tenancy

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
)

// TestLuaFilesEmbeddedAndCompile: every file under lua/ is embedded by a go:embed
// directive of the package (none lies unused beside the code), and every script
// built from them compiles in a real Redis (SCRIPT LOAD), with no global variable
// left undefined by the parts it is put together from (Redis refuses a script that
// reads an undefined global at load only when run, so each is also run once on empty
// keys by the suites that use it: TestRedis*, TestLease*). What each script decides is
// tested by those suites (TestRedisFlushScriptMatchesOneByOne: flush.lua against the
// one-request scripts; TestRedisGCRAMatchesRedisRate: lib_gcra*.lua against
// redis_rate; TestLeaseBank*: lease.lua and reconcile.lua against the in-memory bank).
func TestLuaFilesEmbeddedAndCompile(t *testing.T) {
	files, err := filepath.Glob("lua/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no lua files: %v", err)
	}
	gos, _ := filepath.Glob("*.go")
	var embedded []string
	re := regexp.MustCompile(`(?m)^//go:embed (lua/\S+\.lua)$`)
	for _, g := range gos {
		if strings.HasSuffix(g, "_test.go") {
			continue
		}
		b, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			embedded = append(embedded, m[1])
		}
	}
	for _, f := range files {
		if !slices.Contains(embedded, filepath.ToSlash(f)) {
			t.Errorf("%s is embedded by no go:embed directive of the package", f)
		}
	}

	srv := redistest.Start(t, redistest.Options{})
	c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: "lua"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for name, s := range map[string]*redis.Script{
		"reserve": reserveScript, "renew": renewScript, "reap": reapScript, "allow": allowScript,
		"admit_job": admitJobScript, "renew_jobs": renewJobsScript, "flush": flushScript,
		"tokens": tokensScript, "lease": leaseScript, "reconcile": reconcileScript, "release": releaseScript,
	} {
		if err := s.Load(context.Background(), c).Err(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
