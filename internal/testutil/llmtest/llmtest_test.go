package llmtest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestAnswersReportTheChosenUsage(t *testing.T) {
	s := Start(t)
	url := s.URL + "/v1/chat/completions"
	ctx := context.Background()
	for _, stream := range []bool{false, true} {
		u := Usage{Prompt: 120, Completion: 380, Cached: 40}
		r, err := Do(ctx, http.DefaultClient, url, Call{Stream: stream, Usage: u})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusOK || r.Usage != u {
			t.Errorf("stream=%v: %d, usage %v; want 200 with %v\n%s", stream, r.Status, r.Usage, u, r.Body)
		}
		if stream && (!strings.Contains(r.Body, `"usage":null`) || !strings.HasSuffix(r.Body, "data: [DONE]\n\n")) {
			t.Errorf("the stream is not in OpenAI's include_usage shape:\n%s", r.Body)
		}
	}
	if got := s.Total(); got != 1000 {
		t.Errorf("Total = %d, want 1000 (two answers of 500)", got)
	}
}

func TestStreamWithoutIncludeUsageReportsNone(t *testing.T) {
	s := Start(t)
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	req.Header.Set(UsageHeader, "prompt=5 completion=7")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	if _, err := ReadUsage(resp.Header.Get("Content-Type"), []byte(b.String())); !errors.Is(err, ErrNoUsage) {
		t.Errorf("ReadUsage = %v, want ErrNoUsage:\n%s", err, b.String())
	}
}

func TestBadRequestsAreRefused(t *testing.T) {
	s := Start(t)
	for _, c := range []struct{ usage, body, want string }{
		{"prompt=x", `{"model":"m","messages":[{}]}`, "X-Test-Usage"},
		{"tokens=3", `{"model":"m","messages":[{}]}`, "unknown quantity"},
		{"", `{"model":"m"}`, "messages are required"},
		{"", `{`, "request body"},
	} {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(c.body))
		req.Header.Set(UsageHeader, c.usage)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(b.String(), c.want) {
			t.Errorf("%q %s: %d %s, want 400 naming %q", c.usage, c.body, resp.StatusCode, b.String(), c.want)
		}
	}
	if len(s.Served()) != 0 {
		t.Errorf("refused requests were recorded as served: %v", s.Served())
	}
}

func TestHeldStreamWaitsBeforeItsUsage(t *testing.T) {
	s := Start(t)
	s.Hold()
	done := make(chan Reply, 1)
	go func() {
		r, err := Do(context.Background(), http.DefaultClient, s.URL+"/v1/chat/completions", Call{Stream: true, Usage: Usage{Completion: 9}})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	<-s.Arrived()
	select {
	case r := <-done:
		t.Fatalf("a held answer finished: %v", r)
	case <-time.After(100 * time.Millisecond):
	}
	if got := s.Total(); got != 0 {
		t.Errorf("Total while held = %d, want 0", got)
	}
	s.Release()
	if r := <-done; r.Usage.Completion != 9 || s.Total() != 9 {
		t.Errorf("after Release: usage %v, Total %d; want 9 completion tokens", r.Usage, s.Total())
	}
}
