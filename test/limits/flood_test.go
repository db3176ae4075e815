package limits

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// idleFlood keeps connections to addr open without sending a byte (no
// HTTP/2 preface), from a few loopback addresses: each one the server
// closes is dialed again after a pause, until the test ends.
type idleFlood struct {
	dials, closed atomic.Int64
	stop          chan struct{}
	wg            sync.WaitGroup
}

// floodRedial is how long a flood connection the server closed waits
// before it dials again: short enough to keep the flood up, long enough
// that hundreds of them do not take the machine's CPU.
const floodRedial = time.Second

func startIdleFlood(t *testing.T, addr string, perPeer int, from ...string) *idleFlood {
	t.Helper()
	f := &idleFlood{stop: make(chan struct{})}
	for _, ip := range from {
		for range perPeer {
			f.wg.Add(1)
			go f.hold(ip, addr)
		}
	}
	t.Cleanup(func() {
		close(f.stop)
		f.wg.Wait()
	})
	return f
}

func (f *idleFlood) hold(from, addr string) {
	defer f.wg.Done()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	for {
		f.dials.Add(1)
		if c, err := d.Dial("tcp", addr); err == nil {
			closed := make(chan struct{})
			go func() {
				_, _ = io.Copy(io.Discard, c) // until the server closes it
				close(closed)
			}()
			select {
			case <-closed:
				f.closed.Add(1)
			case <-f.stop:
			}
			c.Close()
		}
		select {
		case <-f.stop:
			return
		case <-time.After(floodRedial):
		}
	}
}

// checkPath is the ext_authz method the raw HTTP/2 streams call.
const checkPath = "/envoy.service.auth.v3.Authorization/Check"

// h2Conn is a hand-driven HTTP/2 client connection to the gRPC endpoint:
// its preface and SETTINGS sent, a reader that acknowledges the server's
// SETTINGS and PINGs and counts the streams the server refused.
type h2Conn struct {
	c  net.Conn
	fr *http2.Framer

	wmu    sync.Mutex // guards writes, enc, hbuf and next
	enc    *hpack.Encoder
	hbuf   bytes.Buffer
	next   uint32
	sent   atomic.Int64
	closed chan struct{}

	settings   chan struct{} // closed on the server's first SETTINGS
	maxStreams atomic.Int64  // its SETTINGS_MAX_CONCURRENT_STREAMS, -1 when not sent
	refused    atomic.Int64  // RST_STREAM REFUSED_STREAM received
	readErr    error
}

func dialH2(t *testing.T, from, addr string) *h2Conn {
	t.Helper()
	c := dialFrom(t, from, addr)
	h := &h2Conn{c: c, fr: http2.NewFramer(c, c), next: 1, closed: make(chan struct{}), settings: make(chan struct{})}
	h.enc = hpack.NewEncoder(&h.hbuf)
	h.maxStreams.Store(-1)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go h.read()
	t.Cleanup(func() { c.Close() })
	select {
	case <-h.settings:
	case <-h.closed:
		t.Fatalf("HTTP/2 connection from %s closed before the server's SETTINGS: %v", from, h.readErr)
	case <-time.After(20 * time.Second):
		t.Fatalf("HTTP/2 connection from %s: no SETTINGS from the server", from)
	}
	return h
}

func (h *h2Conn) read() {
	defer close(h.closed)
	first := true
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.readErr = err
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			if v, ok := f.Value(http2.SettingMaxConcurrentStreams); ok {
				h.maxStreams.Store(int64(v))
			}
			h.write(func() error { return h.fr.WriteSettingsAck() })
			if first {
				first = false
				close(h.settings)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.write(func() error { return h.fr.WritePing(true, f.Data) })
			}
		case *http2.RSTStreamFrame:
			if f.ErrCode == http2.ErrCodeRefusedStream {
				h.refused.Add(1)
			}
		}
	}
}

func (h *h2Conn) write(w func() error) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	_ = w()
}

// open sends the HEADERS of a new ext_authz call and no message, so the
// call waits for a request that never comes; reset, it is canceled at
// once (a rapid reset). It reports false once the connection is closed.
func (h *h2Conn) open(reset bool) bool {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.hbuf.Reset()
	for _, hf := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: checkPath},
		{Name: ":authority", Value: "sluice"}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		_ = h.enc.WriteField(hf)
	}
	id := h.next
	h.next += 2
	_ = h.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return false
	}
	if reset {
		if err := h.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			return false
		}
	}
	h.sent.Add(1)
	return true
}

// rapidReset opens and cancels streams on h as fast as it can until stop
// is closed or the connection ends.
func (h *h2Conn) rapidReset(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-h.closed:
			return
		default:
		}
		if !h.open(true) {
			return
		}
	}
}

// waitRefused waits until the server has refused n streams of h.
func (h *h2Conn) waitRefused(t *testing.T, n int64) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if h.refused.Load() >= n {
			return
		}
		select {
		case <-h.closed:
			t.Fatalf("HTTP/2 connection closed after %d refused streams of %d sent: %v", h.refused.Load(), h.sent.Load(), h.readErr)
		default:
		}
	}
	t.Fatalf("%d streams refused of %d sent, want at least %d (server's SETTINGS_MAX_CONCURRENT_STREAMS: %d)", h.refused.Load(), h.sent.Load(), n, h.maxStreams.Load())
}
