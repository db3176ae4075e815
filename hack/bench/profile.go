package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

// profileUnderLoad takes a CPU profile from the pprof server at pprofAddr
// (a `--pprof-listen` address) while load runs for d, saves it to file and
// returns `go tool pprof -top -cum` of it, headed by what and the load's
// throughput during the profile.
func profileUnderLoad(pprofAddr, manager, file, what string, d time.Duration, load func() (rps float64, err error)) (string, error) {
	secs := max(1, int(d.Seconds())-1)
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		time.Sleep(500 * time.Millisecond) // into the load
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, secs))
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("pprof: %s: %s", resp.Status, b)
		}
		done <- result{b, err}
	}()
	rps, err := load()
	if err != nil {
		return "", err
	}
	r := <-done
	if r.err != nil {
		return "", r.err
	}
	if err := os.WriteFile(file, r.b, 0o644); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "bench: CPU profile of Sluice (%s, %.0f req/s) saved to %s\n", what, rps, file)
	top, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=30", manager, file).Output()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %w", err)
	}
	return fmt.Sprintf("%s: %.0f req/s during the profile, saved to %s\n%s", what, rps, file, top), nil
}

// profileFile is the file a profile of one configuration goes to: base
// (the -rls-profile or -http-profile value) without .pprof, then -name.
func profileFile(base, name string) string {
	return strings.TrimSuffix(base, ".pprof") + "-" + name + ".pprof"
}
