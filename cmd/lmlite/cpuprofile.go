package main

import (
	"os"
	"runtime"
	"runtime/pprof"
)

// startCPUProfile writes a CPU profile to path (serve's and bench's --cpuprofile)
// until stop is called; with no path it does nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// startWaitProfiles records where goroutines wait (serve's --blockprofile: blocking
// on channels, locks and selects, every event; --mutexprofile: contended
// sync.Mutex/RWMutex, every event) and writes each profile to its path when stop is
// called (and stops recording); an empty path records nothing of that kind.
func startWaitProfiles(blockPath, mutexPath string) (stop func() error) {
	if blockPath != "" {
		runtime.SetBlockProfileRate(1)
	}
	if mutexPath != "" {
		runtime.SetMutexProfileFraction(1)
	}
	return func() error {
		if blockPath != "" {
			defer runtime.SetBlockProfileRate(0)
		}
		if mutexPath != "" {
			defer runtime.SetMutexProfileFraction(0)
		}
		var first error
		for _, p := range []struct{ name, path string }{{"block", blockPath}, {"mutex", mutexPath}} {
			if p.path == "" {
				continue
			}
			f, err := os.Create(p.path)
			if err == nil {
				err = pprof.Lookup(p.name).WriteTo(f, 0)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}
