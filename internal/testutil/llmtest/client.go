package llmtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Call is one chat completion request a test sends.
type Call struct {
	Stream bool
	// Usage is what the upstream is asked to report (UsageHeader).
	Usage  Usage
	Header map[string]string
}

// Reply is what the client saw.
type Reply struct {
	Status int
	Header http.Header
	// Usage is the usage the answer reported (zero, with ErrNoUsage from
	// ReadUsage, for one that reported none: a denial, an error).
	Usage Usage
	Body  string
}

// Do sends c to url (the proxy's /v1/chat/completions) and reads the whole
// answer.
func Do(ctx context.Context, client *http.Client, url string, c Call) (Reply, error) {
	body := map[string]any{"model": "test-model", "messages": []any{map[string]any{"role": "user", "content": "Say hello."}}}
	if c.Stream {
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return Reply{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return Reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(UsageHeader, c.Usage.String())
	for k, v := range c.Header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return Reply{}, fmt.Errorf("read the answer: %w", err)
	}
	r := Reply{Status: resp.StatusCode, Header: resp.Header, Body: string(raw)}
	if u, err := ReadUsage(resp.Header.Get("Content-Type"), raw); err == nil {
		r.Usage = u
	}
	return r, nil
}

// ErrNoUsage is returned by ReadUsage for an answer that reports none.
var ErrNoUsage = errors.New("the answer reports no usage")

type usageJSON struct {
	Usage *struct {
		Prompt     int64 `json:"prompt_tokens"`
		Completion int64 `json:"completion_tokens"`
		Details    struct {
			Cached int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func (j usageJSON) usage() (Usage, bool) {
	if j.Usage == nil {
		return Usage{}, false
	}
	return Usage{Prompt: j.Usage.Prompt, Completion: j.Usage.Completion, Cached: j.Usage.Details.Cached}, true
}

// ReadUsage reads the usage an answer reports: a JSON body's usage, or the
// usage of the event stream's chunk that carries one.
func ReadUsage(contentType string, body []byte) (Usage, error) {
	if !strings.HasPrefix(contentType, "text/event-stream") {
		var j usageJSON
		if err := json.Unmarshal(body, &j); err != nil {
			return Usage{}, fmt.Errorf("the answer's JSON: %w", err)
		}
		if u, ok := j.usage(); ok {
			return u, nil
		}
		return Usage{}, ErrNoUsage
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var j usageJSON
		if err := json.Unmarshal([]byte(data), &j); err != nil {
			return Usage{}, fmt.Errorf("an event's JSON: %w", err)
		}
		if u, ok := j.usage(); ok {
			return u, nil
		}
	}
	if err := sc.Err(); err != nil {
		return Usage{}, err
	}
	return Usage{}, ErrNoUsage
}
