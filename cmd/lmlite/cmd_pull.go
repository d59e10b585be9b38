package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/pull"
)

func init() {
	register("pull", "download GGUF models into the cache: pull hf://ORG/REPO/FILE.gguf | https://… | NAME (or every pull: model of --config)", runPull)
}

// pullDir is the pull cache of a data directory.
func pullDir(dataDir string) string { return filepath.Join(dataDir, "pull") }

// offlineEnv says whether the environment asks for no network (HF_HUB_OFFLINE=1, as
// huggingface_hub reads it, or LMLITE_OFFLINE=1).
func offlineEnv() bool {
	for _, k := range []string{"HF_HUB_OFFLINE", "LMLITE_OFFLINE"} {
		switch strings.ToLower(os.Getenv(k)) {
		case "1", "true", "yes", "on":
			return true
		}
	}
	return false
}

func runPull(args []string) error {
	fs := newFlags("pull")
	cfgPath := fs.String("config", "", "config file: its data_dir holds the cache, and with no REF every model with pull: is pulled")
	dataDir := fs.String("data-dir", "", "data directory whose pull/ holds the cache (default: the config's data_dir, else data)")
	offline := fs.Bool("offline", offlineEnv(), "use the cache only, never the network (default from HF_HUB_OFFLINE / LMLITE_OFFLINE)")
	sha := fs.String("sha256", "", "expected sha256 of the file (one REF only); default: the hub's LFS digest or the catalogue's")
	catFile := fs.String("catalogue", "", "a catalogue file of model names ({models: {NAME: {pull, sha256}}}); default: the built-in one")
	list := fs.Bool("list", false, "list the catalogue's models and exit")
	quiet := fs.Bool("q", false, "quiet: no progress, only the result lines")
	refs, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	cat := pull.Builtin()
	if *catFile != "" {
		b, err := os.ReadFile(*catFile)
		if err != nil {
			return err
		}
		if cat, err = pull.ParseCatalogue(b); err != nil {
			return err
		}
	}
	if *list {
		return listCatalogue(os.Stdout, cat)
	}
	if *dataDir == "" || (len(refs) == 0 && *cfgPath != "") {
		cfg, err := loadConfig(*cfgPath)
		if err != nil {
			return err
		}
		if *dataDir == "" {
			*dataDir = cfg.DataDir
		}
		if len(refs) == 0 {
			for _, m := range cfg.Models {
				if m.Pull != "" {
					refs = append(refs, m.Pull)
				}
			}
			if len(refs) == 0 {
				return fmt.Errorf("no REF given and no model of %s has pull:", configName(*cfgPath))
			}
		}
	}
	if len(refs) == 0 {
		fs.Usage()
		return errUsage
	}
	if *sha != "" && len(refs) != 1 {
		return errors.New("--sha256 takes one REF")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := pull.Options{
		Dir: pullDir(*dataDir), Token: os.Getenv("HF_TOKEN"), Catalogue: cat,
		SHA256: *sha, Offline: *offline, Notice: func(s string) { fmt.Fprintln(os.Stderr, s) },
	}
	if !*quiet {
		pr := newPullPrinter(os.Stderr, isTerminal(os.Stderr))
		o.Progress = pr.show
		o.ProgressEvery = pr.every()
	}
	for _, ref := range refs {
		r, err := pull.Pull(ctx, ref, o)
		if err != nil {
			return err
		}
		fmt.Println(resultLine(ref, r))
	}
	return nil
}

// parseInterleaved parses flags and positional arguments in any order.
func parseInterleaved(fs interface {
	Parse([]string) error
	Args() []string
}, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func configName(path string) string {
	if path == "" {
		return "the demo config"
	}
	return path
}

func listCatalogue(w io.Writer, cat pull.Catalogue) error {
	names := make([]string, 0, len(cat))
	for n := range cat {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "%-32s %s\n", n, cat[n].Pull)
	}
	return nil
}

// resultLine is the one line printed for a pulled reference.
func resultLine(ref string, r pull.Result) string {
	how := "downloaded"
	if r.Cached {
		how = "cached"
	}
	verified := "verified against the " + r.Verified
	if r.Verified == "" {
		verified = "NOT verified: the server gave no sha256 (pass --sha256 to pin it)"
	}
	return fmt.Sprintf("%s: %s (%s, %s, sha256 %s, %s)", ref, r.Path, how, humanBytes(r.Size), r.SHA256, verified)
}

// isTerminal says whether f is a character device (a terminal, not a file or pipe).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// pullPrinter draws pull progress: a bar redrawn in place on a terminal, a plain
// line every few seconds otherwise (logs, CI, an init container).
type pullPrinter struct {
	w   io.Writer
	tty bool
	mu  sync.Mutex // guards w's line state
}

func newPullPrinter(w io.Writer, tty bool) *pullPrinter {
	return &pullPrinter{w: w, tty: tty}
}

func (p *pullPrinter) every() time.Duration {
	if p.tty {
		return 200 * time.Millisecond
	}
	return 5 * time.Second
}

func (p *pullPrinter) show(pr pull.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		end := ""
		if pr.Final {
			end = "\n"
		}
		fmt.Fprintf(p.w, "\r%s\x1b[K%s", progressBar(pr, 30), end)
		return
	}
	fmt.Fprintln(p.w, progressLine(pr))
}

// progressBar is the terminal's line: name, bar, bytes, rate and ETA.
func progressBar(p pull.Progress, width int) string {
	bar := strings.Repeat("·", width)
	pct := ""
	if p.Total > 0 {
		n := int(int64(width) * p.Done / p.Total)
		bar = strings.Repeat("█", n) + strings.Repeat("·", width-n)
		pct = fmt.Sprintf(" %3d%%", 100*p.Done/p.Total)
	}
	return fmt.Sprintf("%s [%s]%s %s", shortRef(p.Ref), bar, pct, progressFigures(p))
}

// progressLine is the plain line: no control characters.
func progressLine(p pull.Progress) string {
	pct := ""
	if p.Total > 0 {
		pct = fmt.Sprintf(" (%d%%)", 100*p.Done/p.Total)
	}
	state := "pulling"
	if p.Final {
		state = "pulled"
	}
	return fmt.Sprintf("%s %s:%s %s", state, p.Ref, pct, progressFigures(p))
}

func progressFigures(p pull.Progress) string {
	s := humanBytes(p.Done)
	if p.Total >= 0 {
		s += " of " + humanBytes(p.Total)
	}
	if p.Rate > 0 {
		s += ", " + humanBytes(int64(p.Rate)) + "/s"
	}
	if p.ETA >= 0 && !p.Final {
		s += ", ETA " + p.ETA.String()
	}
	if p.Resumed > 0 {
		s += ", resumed at " + humanBytes(p.Resumed)
	}
	return s
}

// shortRef keeps a reference's last path element (the file name) for the bar.
func shortRef(ref string) string {
	if i := strings.LastIndex(ref, "/"); i >= 0 && i < len(ref)-1 {
		return ref[i+1:]
	}
	return ref
}

// humanBytes formats a byte count in binary units.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// resolvePulls resolves the configuration's pull: models to cached files, downloading
// those not in the cache (unless offline). It runs once at serve start.
func resolvePulls(ctx context.Context, cfg *configs.Config, w io.Writer, tty bool) error {
	o := pull.Options{
		Dir: pullDir(cfg.DataDir), Token: os.Getenv("HF_TOKEN"), Offline: offlineEnv(),
		Notice: func(s string) { fmt.Fprintln(w, s) },
	}
	pr := newPullPrinter(w, tty)
	o.Progress, o.ProgressEvery = pr.show, pr.every()
	for i := range cfg.Models {
		m := &cfg.Models[i]
		if m.Pull == "" {
			continue
		}
		r, err := pull.Pull(ctx, m.Pull, o)
		if err != nil {
			return fmt.Errorf("model %s: %w", m.ID, err)
		}
		m.PulledPath = r.Path
		fmt.Fprintf(w, "model %s: %s\n", m.ID, resultLine(m.Pull, r))
	}
	return nil
}
