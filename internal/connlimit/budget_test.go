package connlimit

import (
	"log/slog"
	"testing"
)

// TestBudget: the listeners' process caps together stay within three
// quarters of the open-file limit, shared max-min fairly; a small ask is
// kept, no cap takes no share, and an unknown limit lowers nothing.
func TestBudget(t *testing.T) {
	httpCaps := func(n int) Caps { return Caps{Listener: HTTP, MaxConns: n, PerPeer: 1024} }
	grpcCaps := func(n int) Caps { return Caps{Listener: GRPC, MaxConns: n, PerPeer: 128} }
	for _, tc := range []struct {
		name       string
		nofile     uint64
		asked      []Caps
		http, grpc int // process caps in force; -1: not asked
	}{
		{"alone, lowered", 256, []Caps{httpCaps(10_000)}, 192, -1},
		{"alone, fits", 1 << 20, []Caps{httpCaps(10_000)}, 10_000, -1},
		{"unknown limit", 0, []Caps{httpCaps(10_000), grpcCaps(1024)}, 10_000, 1024},
		{"both fit", 1 << 20, []Caps{httpCaps(10_000), grpcCaps(1024)}, 10_000, 1024},
		{"equal shares", 256, []Caps{httpCaps(10_000), grpcCaps(1024)}, 96, 96},
		{"a small ask is kept", 256, []Caps{httpCaps(10_000), grpcCaps(60)}, 132, 60},
		{"a small ask is kept, in any order", 256, []Caps{grpcCaps(10_000), httpCaps(60)}, 60, 132},
		{"the larger share to the larger ask", 1024, []Caps{httpCaps(10_000), grpcCaps(1024)}, 384, 384},
		{"no cap takes no share", 256, []Caps{httpCaps(10_000), grpcCaps(0)}, 192, 0},
		{"no cap is kept", 256, []Caps{httpCaps(0), grpcCaps(1024)}, 0, 192},
		{"tiny limit", 2, []Caps{httpCaps(10), grpcCaps(10)}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBudget(tc.nofile, slog.Default(), tc.asked...)
			for _, want := range []struct {
				listener string
				max      int
			}{{HTTP, tc.http}, {GRPC, tc.grpc}} {
				got, ok := b.Caps(want.listener)
				if want.max < 0 {
					if ok {
						t.Errorf("%s: %+v, want not asked", want.listener, got)
					}
					continue
				}
				if !ok || got.MaxConns != want.max || got.Listener != want.listener {
					t.Errorf("%s: %+v (asked %v), want a process cap of %d", want.listener, got, ok, want.max)
				}
				for _, a := range tc.asked {
					if a.Listener == want.listener && got.PerPeer != a.PerPeer {
						t.Errorf("%s: per-peer cap %d, want %d as asked", want.listener, got.PerPeer, a.PerPeer)
					}
				}
			}
		})
	}
}

// TestResolve: 0 is the default, negative no cap.
func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		maxConns, perPeer int
		want              Caps
	}{
		{0, 0, Caps{GRPC, 1024, 128}},
		{10, 5, Caps{GRPC, 10, 5}},
		{-1, -1, Caps{GRPC, 0, 0}},
	} {
		if got := Resolve(GRPC, tc.maxConns, tc.perPeer, 1024, 128); got != tc.want {
			t.Errorf("Resolve(%d, %d) = %+v, want %+v", tc.maxConns, tc.perPeer, got, tc.want)
		}
	}
}
