package main

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
)

// servePprof serves the Go profiler on its own listener when addr is set,
// so profiles can be taken under load without exposing it on the check port.
func servePprof(addr string) {
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	go func() {
		if err := http.ListenAndServe(addr, mux); err != nil {
			slog.Error("pprof listener", "addr", addr, "err", err)
		}
	}()
}
