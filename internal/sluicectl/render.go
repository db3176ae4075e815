package sluicectl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
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

// table writes rows under a header, in aligned columns; its cells are
// shown, made visible (a tab or newline in a value would forge a column
// or a row).
func table(w io.Writer, header []shown, rows [][]shown) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range append([][]shown{header}, rows...) {
		for i, c := range r {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, string(c))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// limitRows are the rows of limits, with the columns of header. While
// reservations are live (charge Reserve), what is spent is told apart
// from what is reserved: SPENT is the quota's units taken and settled,
// RESERVED the estimates not yet settled (REMAINING counts both).
func limitRows(limits []adminapi.LimitState) (header []shown, rows [][]shown) {
	reserves := slices.ContainsFunc(limits, func(l adminapi.LimitState) bool { return l.Reserved > 0 })
	header = limitHeader
	if reserves {
		header = slices.Insert(slices.Clone(limitHeader), 4, "SPENT", "RESERVED")
	}
	rows = make([][]shown, 0, len(limits))
	for _, l := range limits {
		override := shown("-")
		if o := l.Override; o != nil {
			override = visible(o.Source) + " (policy " + number(o.PolicyLimit) + ")"
		}
		row := []shown{visible(l.Name), visible(l.Algorithm), number(l.Limit), number(l.Remaining)}
		if reserves {
			row = append(row, number(max(l.Limit-l.Remaining-l.Reserved, 0)), number(l.Reserved))
		}
		rows = append(rows, append(row, visible(l.Reset), yesNo(l.Allowed), visible(l.RetryAfter), override))
	}
	return header, rows
}

var limitHeader = []shown{"LIMIT", "ALGORITHM", "QUOTA", "REMAINING", "RESET", "ALLOWED", "RETRY-AFTER", "OVERRIDE"}

func number(n int64) shown { return shown(strconv.FormatInt(n, 10)) }

func yesNo(b bool) shown {
	if b {
		return "yes"
	}
	return "no"
}

func writeBan(w io.Writer, b *adminapi.Ban) error {
	if b == nil {
		return writef(w, "ban: none\n")
	}
	return writef(w, "ban: %s left of %s\n", b.Remaining, b.Length)
}

func renderInspect(w io.Writer, _ *call, body []byte) error {
	var a adminapi.KeyState
	if err := decode(body, &a); err != nil {
		return err
	}
	if err := renderKeyState(w, a.Namespace, a.Policy, visible(a.Key), a.Limits, a.Ban); err != nil || len(a.Quota) == 0 {
		return err
	}
	return table(w, quotaHeader, quotaRows(a.Quota))
}

// quotaHeader and quotaRows draw what each Envoy holds of the bucket
// through the rate limit quota service.
var quotaHeader = []shown{"ENVOY", "ASSIGNMENT", "MAX-TOKENS", "TOKENS-PER-FILL", "INTERVAL", "WANT", "REPORTED", "ALLOWED", "DENIED"}

func quotaRows(shares []adminapi.QuotaShare) [][]shown {
	rows := make([][]shown, 0, len(shares))
	for _, q := range shares {
		rows = append(rows, []shown{visible(q.Envoy), visible(q.Action), number(q.MaxTokens), number(q.TokensPerFill), visible(q.Interval),
			number(q.Want), visible(q.Reported), shown(strconv.FormatUint(q.Allowed, 10)), shown(strconv.FormatUint(q.Denied, 10))})
	}
	return rows
}

// renderKeyState draws a key value's limits and ban under a policy.
func renderKeyState(w io.Writer, namespace, policy string, key shown, limits []adminapi.LimitState, ban *adminapi.Ban) error {
	if err := writef(w, "%s/%s key %s\n", namespace, policy, key); err != nil {
		return err
	}
	header, rows := limitRows(limits)
	if err := table(w, header, rows); err != nil {
		return err
	}
	return writeBan(w, ban)
}

// missingKey stands for the key of a request its policy found no value of.
const missingKey = "(missing)"

func renderExplain(w io.Writer, _ *call, body []byte) error {
	var a adminapi.Explanation
	if err := decode(body, &a); err != nil {
		return err
	}
	rows := make([][]shown, 0, len(a.Policies))
	for _, p := range a.Policies {
		key := shown("-")
		if p.Matched {
			key = orDash(p.Key)
			if p.MissingKey != nil && *p.MissingKey {
				key = missingKey
			}
		}
		rows = append(rows, []shown{visible(p.Name), yesNo(p.Matched), key, orDash(&p.Reason)})
	}
	if err := table(w, []shown{"POLICY", "MATCHED", "KEY", "REASON"}, rows); err != nil {
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
		return writef(w, "\ndecision: refused (%s): %s\n", d.Reason, visibleText(d.Detail))
	}
	verdict := "allowed"
	if !d.Allowed {
		verdict = "denied"
	}
	line, args := "\ndecision: %s (%s)", []any{shown(verdict), d.Reason}
	if d.Policy != "" {
		line, args = line+" by %s", append(args, d.Policy)
		if d.Limit != "" {
			line, args = line+"/%s", append(args, d.Limit)
		}
	}
	if !d.Allowed && d.RetryAfter != "" {
		line, args = line+", retry after %s", append(args, d.RetryAfter)
	}
	return writef(w, line+"\n", args...)
}

func renderReset(w io.Writer, _ *call, body []byte) error {
	var a adminapi.ResetAnswer
	if err := decode(body, &a); err != nil {
		return err
	}
	limits := make([]string, len(a.Limits))
	for i, l := range a.Limits {
		limits[i] = string(visible(l))
	}
	return writef(w, "reset key %s of %s/%s: %s\n", a.Key, a.Namespace, a.Policy, shown(strings.Join(limits, ", ")))
}

func renderTop(w io.Writer, _ *call, body []byte) error {
	var a adminapi.TopAnswer
	if err := decode(body, &a); err != nil {
		return err
	}
	if err := writef(w, "%s/%s, last %s\n", a.Namespace, a.Policy, a.Window); err != nil {
		return err
	}
	for _, part := range []struct {
		title shown
		keys  []adminapi.TopKey
	}{{"DENIED", a.Denied}, {"ADMITTED", a.Admitted}} {
		rows := make([][]shown, 0, len(part.keys))
		for _, k := range part.keys {
			rows = append(rows, []shown{visible(k.Key), number(k.Count), "+" + number(k.Overestimate)})
		}
		fmt.Fprintln(w)
		if err := table(w, []shown{part.title, "COUNT", "AT MOST OVER BY"}, rows); err != nil {
			return err
		}
	}
	if a.ErrorBound != "" {
		return writef(w, "\nerror bound: %s\n", a.ErrorBound)
	}
	return nil
}

func renderBans(w io.Writer, _ *call, body []byte) error {
	var a adminapi.BanList
	if err := decode(body, &a); err != nil {
		return err
	}
	if len(a.Bans) == 0 {
		return writef(w, "no bans in force under %s/%s\n", a.Namespace, a.Policy)
	}
	rows := make([][]shown, 0, len(a.Bans))
	for _, b := range a.Bans {
		rows = append(rows, []shown{visible(b.Key), visible(b.Remaining), visible(b.Length)})
	}
	return table(w, []shown{"KEY", "REMAINING", "LENGTH"}, rows)
}

func overrideRows(list []adminapi.OverrideEntry) [][]shown {
	rows := make([][]shown, 0, len(list))
	for _, o := range list {
		names := make([]string, 0, len(o.Limits))
		for name := range o.Limits {
			names = append(names, name)
		}
		sort.Strings(names)
		limits := make([]string, len(names))
		for i, name := range names {
			limits[i] = string(visible(name)) + "=" + strconv.FormatInt(o.Limits[name], 10)
		}
		expires := shown("-")
		if o.Expires != nil {
			expires = shown(o.Expires.UTC().Format(time.RFC3339))
		}
		rows = append(rows, []shown{visible(o.Key), shown(strings.Join(limits, ",")), visible(o.Source), expires, orDash(&o.SetBy), orDash(&o.Object)})
	}
	return rows
}

var overrideHeader = []shown{"KEY", "LIMITS", "SOURCE", "EXPIRES", "SET BY", "OBJECT"}

// orDash shows s, or "-" when there is none.
func orDash(s *string) shown {
	if s == nil || *s == "" {
		return "-"
	}
	return visible(*s)
}

func renderOverrides(w io.Writer, _ *call, body []byte) error {
	var a adminapi.OverrideList
	if err := decode(body, &a); err != nil {
		return err
	}
	if len(a.Overrides) == 0 {
		return writef(w, "no overrides under %s/%s\n", a.Namespace, a.Policy)
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
		return writef(w, what+" key %s in %s/%s\n", c.key, c.namespace, c.policy)
	}
}
