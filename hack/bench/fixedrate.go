package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

type fixedResult struct {
	sent, conns int
	p50, p99    time.Duration
	errors      int
}

// fixedConns is the fixed-rate generator's connection count: enough that
// a connection's schedule (one request every conns/rate) leaves room for a
// slow answer, as a proxy's pool of upstream connections would.
const fixedConns = 64

// fixedRate sends rate requests per second for d, open loop, in the manner
// of wrk2: connection k owns requests k, k+conns, ..., request i is due at
// start + i/rate, and its latency counts from then, so a stall is charged
// to every request it delayed (no coordinated omission). The generator
// shares the CPUs with what it measures, so it is lean: raw TCP,
// pre-rendered ingress-nginx auth-url requests from 10,000 client IPs, and
// a response reader that allocates nothing.
func fixedRate(rawURL string, rate int, d time.Duration) (fixedResult, error) {
	if rate < 1 {
		return fixedResult{}, fmt.Errorf("rate %d", rate)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return fixedResult{}, err
	}
	requests := authURLRequests(u)
	total := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	conns := make([]net.Conn, fixedConns)
	for k := range conns {
		if conns[k], err = net.Dial("tcp", u.Host); err != nil {
			return fixedResult{}, err
		}
		defer conns[k].Close()
	}
	lat := make([][]time.Duration, len(conns))
	errs := make([]int, len(conns))
	start := time.Now().Add(50 * time.Millisecond)
	var wg sync.WaitGroup
	for k, c := range conns {
		wg.Go(func() {
			r := bufio.NewReaderSize(c, 4096)
			lat[k] = make([]time.Duration, 0, total/len(conns)+1)
			for i := k; i < total; i += len(conns) {
				due := start.Add(time.Duration(i) * interval)
				if wait := time.Until(due); wait > 0 {
					time.Sleep(wait)
				}
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				status, err := exchange(c, r, requests[i%len(requests)])
				lat[k] = append(lat[k], time.Since(due))
				if err != nil || status != 200 {
					errs[k]++
					if err != nil {
						return // the connection is unusable; its remaining requests count as not sent
					}
				}
			}
		})
	}
	wg.Wait()
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return fixedResult{}, errors.New("no requests")
	}
	slices.Sort(all)
	res := fixedResult{sent: len(all), conns: len(conns), p50: all[len(all)/2], p99: all[len(all)*99/100]}
	for _, e := range errs {
		res.errors += e
	}
	res.errors += total - len(all)
	return res, nil
}

// loadClients is how many client IPs the HTTP loads send from.
const loadClients = 10_000

// authURLRequests are the ingress-nginx auth-url requests to u of each of
// the client IPs wrkScript sends from, as raw HTTP/1.1.
func authURLRequests(u *url.URL) [][]byte {
	requests := make([][]byte, loadClients)
	for i := range requests {
		requests[i] = appendAuthURLRequest(nil, u, i)
	}
	return requests
}

// clientIP is the i-th client address of the loads (10.0.0.0 on), as
// wrkScript numbers them.
func clientIP(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", i/65536%256, i/256%256, i%256)
}

// appendAuthURLRequest appends to dst the ingress-nginx auth-url request
// to u from the i-th client IP, as raw HTTP/1.1.
func appendAuthURLRequest(dst []byte, u *url.URL, i int) []byte {
	ip := clientIP(i)
	return fmt.Appendf(dst, "GET %s HTTP/1.1\r\nHost: %s\r\nX-Original-URL: http://shop.example.com/api/items?page=2\r\n"+
		"X-Original-Method: GET\r\nX-Real-IP: %s\r\nX-Forwarded-For: %s\r\nX-Sent-From: nginx-ingress-controller\r\n\r\n", u.RequestURI(), u.Host, ip, ip)
}

// halfLoad is the latency at half the allowing throughput, measured two
// ways: wrk closed loop with the fewest connections that reach the rate,
// and open loop at exactly the rate, where the bare servers under the same
// generator show the floor the machine and the generator set (net/http's,
// which the target names, and fasthttp's, which Sluice's check routes are
// served by).
type halfLoad struct {
	rate       int
	closed     wrkResult
	closedConn int
	open       fixedResult
	// bare and bareFast: the bare net/http and fasthttp servers, open loop.
	bare, bareFast fixedResult
}

func measureHalfLoad(dir string, hc httpConfigs, rate float64, d time.Duration) (halfLoad, error) {
	h := halfLoad{rate: int(rate)}
	for c := 1; ; c *= 2 {
		w, err := runWrk(dir, hc.allow.url, 1, c, d)
		if err != nil {
			return h, fmt.Errorf("closed-loop latency: %w", err)
		}
		h.closed, h.closedConn = w, c
		if w.rps >= rate || c >= 64 {
			break
		}
	}
	var err error
	if h.open, err = fixedRate(hc.allow.url, h.rate, d); err != nil {
		return h, fmt.Errorf("fixed-rate load: %w", err)
	}
	if h.bare, err = fixedRate(hc.bare.url, h.rate, d); err != nil {
		return h, fmt.Errorf("fixed-rate load (%s): %w", hc.bare.name, err)
	}
	if h.bareFast, err = fixedRate(hc.bareFast.url, h.rate, d); err != nil {
		return h, fmt.Errorf("fixed-rate load (%s): %w", hc.bareFast.name, err)
	}
	return h, nil
}

// runFixedRate is `bench fixed-rate`: the open-loop run on its own, to
// compare servers' latency at a rate of one's choosing.
func runFixedRate(args []string) error {
	fs := flag.NewFlagSet("fixed-rate", flag.ContinueOnError)
	target := fs.String("url", "", "check URL, e.g. http://127.0.0.1:8080/check/default")
	rate := fs.Int("rate", 10000, "requests per second")
	d := fs.Duration("duration", 5*time.Second, "how long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	res, err := fixedRate(*target, *rate, *d)
	if err != nil {
		return err
	}
	fmt.Printf("%d req/s over %d connections: p50 %s, p99 %s, %d requests, %d errors\n",
		*rate, res.conns, res.p50, res.p99, res.sent, res.errors)
	return nil
}

// exchange writes one request and reads its response, returning the
// status. It understands what the check endpoint sends: a status line,
// headers with a Content-Length, and that many bytes of body.
func exchange(c net.Conn, r *bufio.Reader, req []byte) (int, error) {
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	length := 0
	for {
		line, err = r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			break
		}
		if name, value, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(name, []byte("Content-Length")) {
			if length, err = strconv.Atoi(string(bytes.TrimSpace(value))); err != nil {
				return 0, fmt.Errorf("bad Content-Length %q", value)
			}
		}
	}
	if _, err := r.Discard(length); err != nil {
		return 0, err
	}
	return status, nil
}
