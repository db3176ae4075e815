package main

import (
	"net"
	"net/netip"
	"testing"
)

// Local mode has no authentication and serves the dashboard, which edits
// policies: by default only this machine may reach it. Exposing it is a
// deliberate --listen.
func TestLocalListensOnLoopbackByDefault(t *testing.T) {
	cfg, _, err := parseLocalFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		t.Fatalf("--listen default %q: %v", cfg.Listen, err)
	}
	if a, err := netip.ParseAddr(host); err != nil || !a.IsLoopback() {
		t.Fatalf("--listen default %q: want a loopback address", cfg.Listen)
	}
	if cfg.GRPC.Listen != "" {
		t.Errorf("--grpc-listen default %q: want off", cfg.GRPC.Listen)
	}
	if cfg.AdminListen != "" {
		t.Errorf("--admin-listen default %q: want off", cfg.AdminListen)
	}
	cfg, pprofAddr, err := parseLocalFlags([]string{"--listen", ":8080"})
	if err != nil || cfg.Listen != ":8080" || pprofAddr != "" {
		t.Fatalf("--listen :8080: %q %q %v", cfg.Listen, pprofAddr, err)
	}
}
