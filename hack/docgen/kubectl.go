package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/sluice-dev/sluice/internal/sluicectl"
)

// The kubectl sluice page is made from the plugin's help text
// (sluicectl.Usage), which `kubectl sluice --help` prints: its synopses,
// its flags (a flag some commands take only says which in its help, as
// "explain: ...") and its exit codes.

// usageSections splits the help text into its sections by their titles
// ("Usage:", "Flags:", "Exit codes:"); the text before the first is "".
func usageSections(text string) map[string][]string {
	sections := map[string][]string{}
	title := ""
	for _, line := range strings.Split(text, "\n") {
		if strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " ") {
			title = strings.TrimSuffix(line, ":")
			continue
		}
		sections[title] = append(sections[title], line)
	}
	return sections
}

// cliFlag is one flag of the help's Flags section.
type cliFlag struct {
	short, long, arg, help string
}

var flagLine = regexp.MustCompile(`^  (?:-(\w), )?\s*--([\w-]+)(?: ([^ ]+))?\s+(.*)$`)

// parseCLIFlags reads the Flags section: a flag per line starting with
// its names, its help continued on the lines indented under it.
func parseCLIFlags(lines []string) []cliFlag {
	var flags []cliFlag
	for _, line := range lines {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flags = append(flags, cliFlag{short: m[1], long: m[2], arg: m[3], help: m[4]})
		} else if t := strings.TrimSpace(line); t != "" && len(flags) > 0 {
			flags[len(flags)-1].help += " " + t
		}
	}
	return flags
}

// owner is the command a flag belongs to ("explain" for "explain: ..."),
// "" for a flag of every command.
func (f cliFlag) owner(commands []string) (string, string) {
	for _, c := range commands {
		if rest, ok := strings.CutPrefix(f.help, c+": "); ok {
			return c, rest
		}
	}
	return "", f.help
}

func (f cliFlag) names() string {
	n := "--" + f.long
	if f.arg != "" {
		n += " " + f.arg
	}
	if f.short != "" {
		return name("-"+f.short) + ", " + name(n)
	}
	return name(n)
}

// kubectlPages is docs/reference/kubectl-sluice.md.
func kubectlPages(string) ([]page, error) {
	s := usageSections(sluicectl.Usage)
	var synopses, commands []string
	for _, line := range s["Usage"] {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "kubectl sluice "); ok {
			synopses = append(synopses, line)
			f := strings.Fields(rest)
			name := f[0]
			if name == "override" {
				name += " " + f[1]
			}
			commands = append(commands, name)
		}
	}
	flags := parseCLIFlags(s["Flags"])
	if len(commands) == 0 || len(flags) == 0 {
		return nil, fmt.Errorf("no commands or flags in sluicectl.Usage")
	}
	d := newDoc("`kubectl sluice --help` (`internal/sluicectl`)")
	d.p("# kubectl sluice")
	d.p("%s", strings.TrimSpace(strings.Join(s[""], " ")))
	d.p("The plugin is the `kubectl-sluice` binary on the `PATH`. In a cluster it calls Sluice's admin API through the API server with the kubeconfig's credentials, so RBAC decides who may do what; in local mode `--server` names the admin listener of `manager local --admin-listen`.")
	d.p("```text\n%s\n```", strings.TrimRight(strings.Join(trimIndent(synopses), "\n"), "\n"))
	d.p("%s", strings.Join(strings.Fields(strings.Join(usageProse(s["Usage"]), " ")), " "))
	for i, c := range commands {
		d.p("## kubectl sluice %s", c)
		d.p("```text\n%s\n```", strings.TrimSpace(synopses[i]))
		var rows [][]string
		for _, f := range flags {
			if owner, help := f.owner(commands); owner == c {
				rows = append(rows, []string{f.names(), text(help)})
			}
		}
		if len(rows) > 0 {
			d.table([]string{"flag", "description"}, "--", rows)
		} else {
			d.p("It takes only the [flags every command takes](#flags-of-every-command).")
		}
	}
	d.p("## Flags of every command")
	var rows [][]string
	for _, f := range flags {
		if owner, help := f.owner(commands); owner == "" {
			rows = append(rows, []string{f.names(), text(help)})
		}
	}
	d.table([]string{"flag", "description"}, "--", rows)
	d.p("## Exit codes")
	rows = nil
	for _, line := range s["Exit codes"] {
		if f := strings.Fields(line); len(f) > 1 {
			rows = append(rows, []string{code(f[0]), strings.Join(f[1:], " ")})
		}
	}
	d.table([]string{"code", "meaning"}, "--", rows)
	return []page{{"docs/reference/kubectl-sluice.md", d.Bytes()}}, nil
}

// usageProse is the Usage section's text after its synopses.
func usageProse(lines []string) []string {
	var out []string
	for _, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "kubectl sluice ") {
			out = append(out, l)
		}
	}
	return out
}

func trimIndent(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimSpace(l)
	}
	return out
}
