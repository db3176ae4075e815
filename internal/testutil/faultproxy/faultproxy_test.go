package faultproxy_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/faultproxy"
)

// echo serves lines back on a loopback port until t ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// ask sends a line and waits up to timeout for it to come back.
func (c *client) ask(line string, timeout time.Duration) (string, time.Duration, error) {
	start := time.Now()
	if _, err := fmt.Fprintln(c.c, line); err != nil {
		return "", 0, err
	}
	_ = c.c.SetReadDeadline(time.Now().Add(timeout))
	got, err := c.r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), time.Since(start), err
}

// TestFaultProxyHelperProcess is the process StartProcess starts.
func TestFaultProxyHelperProcess(*testing.T) { faultproxy.HelperProcess() }

func TestFaults(t *testing.T) {
	t.Run("in process", func(t *testing.T) { testFaults(t, faultproxy.Start(t, echo(t))) })
	t.Run("helper process", func(t *testing.T) {
		testFaults(t, faultproxy.StartProcess(t, echo(t), "TestFaultProxyHelperProcess"))
	})
}

func testFaults(t *testing.T, p faultproxy.Link) {
	c := dial(t, p.Addr())
	if got, _, err := c.ask("hello", time.Second); err != nil || got != "hello" {
		t.Fatalf("no fault: %q, %v", got, err)
	}

	p.Set(faultproxy.Fault{Delay: 80 * time.Millisecond})
	if got, took, err := c.ask("slow", time.Second); err != nil || got != "slow" || took < 80*time.Millisecond {
		t.Errorf("delay 80ms: %q after %s, %v", got, took, err)
	}

	// Held while the blackhole lasts, delivered once it ends.
	p.Set(faultproxy.Fault{Blackhole: true})
	if _, _, err := c.ask("held", 200*time.Millisecond); !isTimeout(err) {
		t.Errorf("blackhole: %v, want a timeout", err)
	}
	fresh := dial(t, p.Addr()) // accepted, and nothing gets through
	if _, _, err := fresh.ask("new", 200*time.Millisecond); !isTimeout(err) {
		t.Errorf("blackhole, new connection: %v, want a timeout", err)
	}
	p.Heal()
	_ = c.c.SetReadDeadline(time.Now().Add(time.Second))
	if got, err := c.r.ReadString('\n'); err != nil || got != "held\n" {
		t.Errorf("after the blackhole: %q, %v; want the held line", got, err)
	}
	_ = fresh.c.SetReadDeadline(time.Now().Add(time.Second))
	if got, err := fresh.r.ReadString('\n'); err != nil || got != "new\n" {
		t.Errorf("after the blackhole, the new connection: %q, %v", got, err)
	}

	// Loss: every line comes back once, in order; some late. A segment
	// lost k times in a row arrives 20ms×(2^k−1) late: the wait allows
	// ten losses in a row (20.5 s), which 100 round trips' 200 segments
	// meet with odds of about 1 in 3,000 (seven, 2.5 s, came about once
	// in 20 runs).
	p.Set(faultproxy.Fault{Loss: 0.3, RTO: 20 * time.Millisecond})
	late := 0
	for i := range 50 {
		want := fmt.Sprint("line", i)
		got, took, err := c.ask(want, 30*time.Second)
		if err != nil || got != want {
			t.Fatalf("loss: %q, %v; want %q", got, err, want)
		}
		if took >= 20*time.Millisecond {
			late++
		}
	}
	if late == 0 || late == 50 {
		t.Errorf("loss 30%%: %d of 50 round trips late", late)
	}

	// Reset: open connections and new ones.
	p.Set(faultproxy.Fault{Reset: true})
	if _, _, err := c.ask("reset", time.Second); err == nil {
		t.Error("reset: the open connection still answers")
	}
	if nc, err := net.Dial("tcp", p.Addr()); err == nil { // the RST may come before connect returns
		_ = nc.SetDeadline(time.Now().Add(time.Second))
		if _, err := fmt.Fprintln(nc, "reset"); err == nil {
			if _, err := bufio.NewReader(nc).ReadString('\n'); err == nil {
				t.Error("reset: a new connection answers")
			}
		}
		_ = nc.Close()
	}
	p.Heal()
	if got, _, err := dial(t, p.Addr()).ask("back", time.Second); err != nil || got != "back" {
		t.Errorf("healed: %q, %v", got, err)
	}

	// Connections close with their clients.
	_ = c.c.Close()
	_ = fresh.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for p.Open() > 1 { // the last healed client is still open
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open after their clients closed", p.Open())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(p.Events()); n == 0 {
		t.Error("no events recorded")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
