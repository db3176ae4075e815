package sluicectl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/adminapi"
)

// renderer draws an answer for people: c is the call that got it.
type renderer func(w io.Writer, c *call, body []byte) error

// render writes the answer in the format asked: the server's JSON itself
// (indented) or as YAML for scripts, a table for people.
func render(w io.Writer, format string, c *call, body []byte) error {
	switch format {
	case "json":
		if len(bytes.TrimSpace(body)) == 0 {
			return nil
		}
		var out bytes.Buffer
		if err := json.Indent(&out, body, "", "  "); err != nil {
			return fmt.Errorf("the server's answer is not JSON: %w", err)
		}
		out.WriteByte('\n')
		_, err := w.Write(out.Bytes())
		return err
	case "yaml":
		if len(bytes.TrimSpace(body)) == 0 {
			return nil
		}
		if !json.Valid(body) {
			return errors.New("the server's answer is not JSON")
		}
		out, err := yaml.JSONToYAML(body)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	return c.render(w, c, body)
}

func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("the server's answer does not read as the admin API's: %w", err)
	}
	return nil
}

// table writes rows under a header, in aligned columns.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func limitRows(limits []adminapi.LimitState) [][]string {
	rows := make([][]string, 0, len(limits))
	for _, l := range limits {
		override := "-"
		if o := l.Override; o != nil {
			override = fmt.Sprintf("%s (policy %d)", o.Source, o.PolicyLimit)
		}
		rows = append(rows, []string{l.Name, l.Algorithm, strconv.FormatInt(l.Limit, 10),
			strconv.FormatInt(l.Remaining, 10), l.Reset, yesNo(l.Allowed), l.RetryAfter, override})
	}
	return rows
}

var limitHeader = []string{"LIMIT", "ALGORITHM", "QUOTA", "REMAINING", "RESET", "ALLOWED", "RETRY-AFTER", "OVERRIDE"}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func banLine(b *adminapi.Ban) string {
	if b == nil {
		return "ban: none"
	}
	return fmt.Sprintf("ban: %s left of %s", b.Remaining, b.Length)
}

func renderInspect(w io.Writer, _ *call, body []byte) error {
	var a adminapi.KeyState
	if err := decode(body, &a); err != nil {
		return err
	}
	return renderKeyState(w, a.Namespace, a.Policy, a.Key, a.Limits, a.Ban)
}

// renderKeyState draws a key value's limits and ban under a policy.
func renderKeyState(w io.Writer, namespace, policy, key string, limits []adminapi.LimitState, ban *adminapi.Ban) error {
	fmt.Fprintf(w, "%s/%s key %s\n", namespace, policy, key)
	if err := table(w, limitHeader, limitRows(limits)); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, banLine(ban))
	return err
}

func renderExplain(w io.Writer, _ *call, body []byte) error {
	var a adminapi.Explanation
	if err := decode(body, &a); err != nil {
		return err
	}
	rows := make([][]string, 0, len(a.Policies))
	for _, p := range a.Policies {
		key, reason := "-", p.Reason
		if p.Matched {
			key = orDash(p.Key)
			if p.MissingKey != nil && *p.MissingKey {
				key = "(missing)"
			}
		}
		if reason == "" {
			reason = "-"
		}
		rows = append(rows, []string{p.Name, yesNo(p.Matched), key, reason})
	}
	if err := table(w, []string{"POLICY", "MATCHED", "KEY", "REASON"}, rows); err != nil {
		return err
	}
	for _, p := range a.Policies {
		if !p.Matched || len(p.Limits) == 0 && p.Ban == nil {
			continue
		}
		fmt.Fprintln(w)
		if err := renderKeyState(w, a.Namespace, p.Name, orDash(p.Key), p.Limits, p.Ban); err != nil {
			return err
		}
	}
	d := a.Decision
	if d.Detail != "" { // the transport refuses the request
		_, err := fmt.Fprintf(w, "\ndecision: refused (%s): %s\n", d.Reason, d.Detail)
		return err
	}
	verdict := "allowed"
	if !d.Allowed {
		verdict = "denied"
	}
	line := fmt.Sprintf("\ndecision: %s (%s)", verdict, d.Reason)
	if d.Policy != "" {
		line += " by " + d.Policy
		if d.Limit != "" {
			line += "/" + d.Limit
		}
	}
	if !d.Allowed && d.RetryAfter != "" {
		line += ", retry after " + d.RetryAfter
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

func renderReset(w io.Writer, _ *call, body []byte) error {
	var a adminapi.ResetAnswer
	if err := decode(body, &a); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "reset key %s of %s/%s: %s\n", a.Key, a.Namespace, a.Policy, strings.Join(a.Limits, ", "))
	return err
}

func renderTop(w io.Writer, _ *call, body []byte) error {
	var a adminapi.TopAnswer
	if err := decode(body, &a); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s/%s, last %s\n", a.Namespace, a.Policy, a.Window)
	for _, part := range []struct {
		title string
		keys  []adminapi.TopKey
	}{{"DENIED", a.Denied}, {"ADMITTED", a.Admitted}} {
		rows := make([][]string, 0, len(part.keys))
		for _, k := range part.keys {
			rows = append(rows, []string{k.Key, strconv.FormatInt(k.Count, 10), "+" + strconv.FormatInt(k.Overestimate, 10)})
		}
		fmt.Fprintln(w)
		if err := table(w, []string{part.title, "COUNT", "AT MOST OVER BY"}, rows); err != nil {
			return err
		}
	}
	if a.ErrorBound != "" {
		fmt.Fprintf(w, "\nerror bound: %s\n", a.ErrorBound)
	}
	return nil
}

func renderBans(w io.Writer, _ *call, body []byte) error {
	var a adminapi.BanList
	if err := decode(body, &a); err != nil {
		return err
	}
	if len(a.Bans) == 0 {
		_, err := fmt.Fprintf(w, "no bans in force under %s/%s\n", a.Namespace, a.Policy)
		return err
	}
	rows := make([][]string, 0, len(a.Bans))
	for _, b := range a.Bans {
		rows = append(rows, []string{b.Key, b.Remaining, b.Length})
	}
	return table(w, []string{"KEY", "REMAINING", "LENGTH"}, rows)
}

func overrideRows(list []adminapi.OverrideEntry) [][]string {
	rows := make([][]string, 0, len(list))
	for _, o := range list {
		names := make([]string, 0, len(o.Limits))
		for name := range o.Limits {
			names = append(names, name)
		}
		sort.Strings(names)
		limits := make([]string, len(names))
		for i, name := range names {
			limits[i] = fmt.Sprintf("%s=%d", name, o.Limits[name])
		}
		expires := "-"
		if o.Expires != nil {
			expires = o.Expires.UTC().Format(time.RFC3339)
		}
		rows = append(rows, []string{o.Key, strings.Join(limits, ","), o.Source, expires, orDash(&o.SetBy), orDash(&o.Object)})
	}
	return rows
}

var overrideHeader = []string{"KEY", "LIMITS", "SOURCE", "EXPIRES", "SET BY", "OBJECT"}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

func renderOverrides(w io.Writer, _ *call, body []byte) error {
	var a adminapi.OverrideList
	if err := decode(body, &a); err != nil {
		return err
	}
	if len(a.Overrides) == 0 {
		_, err := fmt.Fprintf(w, "no overrides under %s/%s\n", a.Namespace, a.Policy)
		return err
	}
	return table(w, overrideHeader, overrideRows(a.Overrides))
}

func renderOverride(w io.Writer, _ *call, body []byte) error {
	var o adminapi.OverrideEntry
	if err := decode(body, &o); err != nil {
		return err
	}
	return table(w, overrideHeader, overrideRows([]adminapi.OverrideEntry{o}))
}

// renderDone reports a change whose answer tables need not show.
func renderDone(what string) renderer {
	return func(w io.Writer, c *call, _ []byte) error {
		_, err := fmt.Fprintf(w, "%s key %s in %s/%s\n", what, c.key, c.namespace, c.policy)
		return err
	}
}
