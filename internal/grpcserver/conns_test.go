package grpcserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-dev/sluice/internal/connlimit"
	"github.com/sluice-dev/sluice/internal/httpserve"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
)

// dialFrom connects to addr from the loopback address from.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reports whether the server closed c (EOF or reset) before
// wait passed, reading and dropping what it sends first (its SETTINGS).
func closedWithin(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// serverSettings reads the server's first frame on c, its SETTINGS.
func serverSettings(t *testing.T, c net.Conn) *http2.SettingsFrame {
	t.Helper()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %v, want SETTINGS", f)
	}
	return sf
}

// TestConnectionCaps: connections over the gRPC listener's share of the
// descriptor budget, or over its per-peer cap, are closed as soon as they
// are accepted and counted; the others are served; a connection that
// does not start HTTP/2 in time is closed; and the server advertises its
// bound on streams.
func TestConnectionCaps(t *testing.T) {
	budget := connlimit.NewBudget(0, slog.Default(), connlimit.Caps{Listener: connlimit.GRPC, MaxConns: 3, PerPeer: 2})
	e := start(t, memstore.New().Backend(), Options{Budget: budget, HandshakeTimeout: 500 * time.Millisecond}, nil)
	rejected := func(reason string) float64 {
		return testutil.ToFloat64(counterOf(t, e.reg, "sluice_grpc_rejected_connections_total", map[string]string{"reason": reason}))
	}

	a := dialFrom(t, "127.0.0.2", e.addr)
	sf := serverSettings(t, a)
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != MaxStreams {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d (sent %v), want %d", v, ok, MaxStreams)
	}
	if v, ok := sf.Value(http2.SettingMaxHeaderListSize); !ok || v != httpserve.MaxHeaderBytes {
		t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE %d (sent %v), want %d", v, ok, httpserve.MaxHeaderBytes)
	}
	silent := dialFrom(t, "127.0.0.2", e.addr)
	if over := dialFrom(t, "127.0.0.2", e.addr); !closedWithin(over, 5*time.Second) {
		t.Error("a third connection of one peer (cap 2) was not closed")
	}
	dialFrom(t, "127.0.0.3", e.addr)
	if over := dialFrom(t, "127.0.0.4", e.addr); !closedWithin(over, 5*time.Second) {
		t.Error("a fourth connection (cap 3) was not closed")
	}
	if p, c := rejected("max_connections_per_peer"), rejected("max_connections"); p != 1 || c != 1 {
		t.Errorf("rejected: per peer %v, process %v; want 1 and 1", p, c)
	}

	// The silent one (no preface) is closed at the handshake deadline,
	// which makes room for a new client.
	if !closedWithin(silent, 10*time.Second) {
		t.Fatal("a connection without the HTTP/2 preface was not closed after the handshake deadline")
	}
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.5")}}
			return d.DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var h *healthpb.HealthCheckResponse
	for { // the server notices the closed connection as it reads it
		if h, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health on a new connection once there is room: %v %v", h, err)
	}
	if got := testutil.ToFloat64(counterOf(t, e.reg, "sluice_grpc_open_connections", nil)); got > 3 {
		t.Errorf("open connections %v, over the cap of 3", got)
	}
}

// TestIdleConnectionClosed: a connection without calls for the idle
// timeout is closed gracefully (GOAWAY), and the client connects again
// for its next call.
func TestIdleConnectionClosed(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{IdleTimeout: 300 * time.Millisecond}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	health := healthpb.NewHealthClient(e.conn)
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	for st := e.conn.GetState(); st != connectivity.Idle; st = e.conn.GetState() {
		if !e.conn.WaitForStateChange(ctx, st) {
			t.Fatalf("the client's connection stayed %v: the server did not close the idle connection", st)
		}
	}
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("call after the idle close: %v", err)
	}
}
