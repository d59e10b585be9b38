package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/tenancy"
)

func init() {
	register("ledger", "ledger verify --config F [--data-dir D]... [--release]: reconcile the processes' ledgers with Redis's spend", runLedger)
}

// dirs is a repeatable flag.
type dirs []string

func (d *dirs) String() string     { return strings.Join(*d, ",") }
func (d *dirs) Set(v string) error { *d = append(*d, v); return nil }

var _ flag.Value = (*dirs)(nil)

// runLedger reconciles the ledgers of every process sharing a Redis (their data
// directories, with the servers stopped) against the spend Redis holds.
func runLedger(args []string) error {
	fs := newFlags("ledger verify")
	cfgPath := fs.String("config", "", "config file naming the redis: block")
	var ds dirs
	fs.Var(&ds, "data-dir", "a process's data directory (repeat for each; default: the config's data_dir)")
	release := fs.Bool("release", false, "first close the leases (redis: {leases: true}, the default) these ledgers' processes held when they stopped: charge what each ledger settled from them, give the rest back")
	if len(args) == 0 || args[0] != "verify" {
		fs.Usage()
		if len(args) > 0 && isHelp(args[0]) {
			return flag.ErrHelp
		}
		return errUsage
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if cfg.Redis == nil {
		return errors.New("the config names no redis: there is nothing to reconcile against")
	}
	if len(ds) == 0 {
		ds = dirs{cfg.DataDir}
	}
	var stores []*tenancy.Store
	for _, d := range ds {
		s, err := tenancy.Open(filepath.Join(d, "lmlite.db"), tenancy.Options{LockTimeout: 300 * time.Millisecond})
		if err != nil {
			return fmt.Errorf("%s: %w (stop its server first)", d, err)
		}
		defer s.Close()
		stores = append(stores, s)
		if n := len(s.Interrupted()); n > 0 { // neither side has charged them yet
			fmt.Printf("%s: %d request(s) interrupted by a kill, charged at their reservation when its server next starts (in neither total yet)\n", d, n)
		}
	}
	spend, err := tenancy.LedgerSpend(stores...)
	if err != nil {
		return err
	}
	rc, err := rediscli.New(rediscli.Options{URL: cfg.Redis.URL, Name: cfg.Redis.NodeID + "-verify"})
	if err != nil {
		return err
	}
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if *release {
		for i, s := range stores {
			sums, err := tenancy.LeaseSums(s)
			if err != nil {
				return err
			}
			back, err := tenancy.ReconcileLeases(rc, cfg.Redis.KeyPrefix, s.ID(), "", sums)
			if err != nil {
				return fmt.Errorf("%s: %w", ds[i], err)
			}
			fmt.Printf("%s: leases released, %v given back\n", ds[i], back)
		}
	}
	rs, err := tenancy.ReconcileRedis(ctx, rc, cfg.Redis.KeyPrefix, spend)
	if err != nil {
		return err
	}
	bad := 0
	for _, r := range rs {
		state := "ok"
		switch {
		case !r.InRedis && r.Ledgers != 0:
			state = "not in redis (expired, or never settled there)"
			bad++
		case !r.Match():
			state = fmt.Sprintf("MISMATCH by %v", r.Ledgers-r.Redis)
			bad++
		}
		fmt.Printf("%-40s ledgers %-14v redis %-14v %s\n", r.SpendWindow, r.Ledgers, r.Redis, state)
	}
	if bad > 0 {
		return fmt.Errorf("%d window(s) differ", bad)
	}
	fmt.Printf("%d window(s) reconciled over %d ledger(s)\n", len(rs), len(stores))
	return nil
}
