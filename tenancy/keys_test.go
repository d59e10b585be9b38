package tenancy

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
)

// keysUnderTest are the two Keys, each with a way to open it again on the same data
// (a restart of the process: its store reopened, or a new RedisKeys on the same Redis).
func keysUnderTest(t *testing.T) map[string]func() (open func() Keys) {
	return map[string]func() func() Keys{
		"bolt": func() func() Keys {
			path := filepath.Join(t.TempDir(), "lmlite.db")
			var s *Store
			return func() Keys {
				if s != nil {
					s.Close()
				}
				s = openStore(t, path, SyncProcess)
				return s.keys
			}
		},
		"redis": func() func() Keys {
			srv := redistest.Start(t, redistest.Options{})
			c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: "keys"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return func() Keys {
				k, err := NewRedisKeys(c, "test:", false)
				if err != nil {
					t.Fatal(err)
				}
				return k
			}
		},
	}
}

// TestKeysBoltAndRedis: what a Keys does, in bbolt and in Redis alike: a key authenticates as its
// tenant and id; a malformed key, a wrong secret and an unknown id are all ErrBadKey;
// a revoked key is ErrBadKey wrapping ErrRevoked, revoked by id or by the whole key;
// listings are sorted by tenant then creation and never carry a hash; and all of it
// is still so when the keys are opened again.
func TestKeysBoltAndRedis(t *testing.T) {
	for name, mk := range keysUnderTest(t) {
		t.Run(name, func(t *testing.T) {
			open := mk()
			k := open()
			t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
			if _, _, err := k.CreateKey("", t0); err == nil {
				t.Fatal("a key for the empty tenant was made")
			}
			kb, ib, err := k.CreateKey("b", t0)
			if err != nil {
				t.Fatal(err)
			}
			ka1, ia1, _ := k.CreateKey("a", t0.Add(time.Second))
			ka2, ia2, _ := k.CreateKey("a", t0.Add(2*time.Second))
			if ib.Tenant != "b" || len(ib.Hash) != 32 || strings.Contains(string(ib.Hash), kb[len(kb)-32:]) {
				t.Fatalf("record %+v", ib)
			}
			if _, err := k.RevokeKey(ka2, t0.Add(time.Minute)); err != nil { // by the whole key
				t.Fatal(err)
			}
			if ki, err := k.RevokeKey("zzzzzzzz", t0); !errors.Is(err, ErrNoKey) {
				t.Fatalf("revoking an unknown id: %+v %v, want ErrNoKey", ki, err)
			}
			for round := range 2 {
				if round == 1 {
					k = open()
				}
				for _, c := range []struct{ key, tenant, id string }{{kb, "b", ib.ID}, {ka1, "a", ia1.ID}} {
					if tenant, id, err := k.Authenticate(c.key); err != nil || tenant != c.tenant || id != c.id {
						t.Fatalf("round %d: %s authenticates as %q %q %v", round, c.tenant, tenant, id, err)
					}
				}
				wrong := kb[:len(kb)-1] + map[bool]string{true: "b", false: "a"}[kb[len(kb)-1] == 'a']
				unknown := "lml_zzzzzzzz_" + kb[len(kb)-32:]
				for _, bad := range []string{"", "sk-x", kb + "x", wrong, unknown} {
					if _, _, err := k.Authenticate(bad); !errors.Is(err, ErrBadKey) || errors.Is(err, ErrRevoked) {
						t.Fatalf("round %d: %q: %v, want ErrBadKey", round, bad, err)
					}
				}
				if _, _, err := k.Authenticate(ka2); !errors.Is(err, ErrBadKey) || !errors.Is(err, ErrRevoked) {
					t.Fatalf("round %d: the revoked key: %v, want ErrBadKey wrapping ErrRevoked", round, err)
				}
				ls := k.Keys()
				if len(ls) != 3 || ls[0].ID != ia1.ID || ls[1].ID != ia2.ID || ls[2].ID != ib.ID || ls[1].Revoked.IsZero() || !ls[0].Revoked.IsZero() {
					t.Fatalf("round %d: listing %v", round, ls)
				}
				for _, ki := range ls {
					if ki.Hash != nil {
						t.Fatalf("round %d: the listing carries %s's hash", round, ki.ID)
					}
				}
			}
			ki, err := k.RevokeKey(ia1.ID, t0.Add(time.Hour)) // by id
			if err != nil || ki.Revoked.IsZero() || ki.Hash != nil {
				t.Fatalf("revoked by id: %+v %v; want revoked, no hash", ki, err)
			}
		})
	}
}
