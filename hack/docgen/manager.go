package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The manager page is made from the built command itself: its usage and
// each subcommand's -h, which the flag package prints from the flag sets
// the subcommand parses, so the page follows every flag as it is bound.

// flagDoc is one flag as -h prints it.
type flagDoc struct {
	name, typ, def, help string
}

// buildManager builds cmd/manager of root into dir.
func buildManager(root, dir string) (string, error) {
	bin := filepath.Join(dir, "manager")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/manager")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/manager: %w\n%s", err, out)
	}
	return bin, nil
}

// helpOf runs bin with args and returns what it printed, on either
// stream. The environment is cleared, so that defaults read from it
// (POD_NAMESPACE, SLUICE_REDIS_*) are the built-in ones.
func helpOf(bin string, args ...string) string {
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, _ := cmd.CombinedOutput() // -h exits 0 or 2 as the flag package likes
	return string(out)
}

// parseFlags reads flag.PrintDefaults' output in help: "  -name type"
// then the usage on lines starting with a tab, a trailing "(default X)"
// being the default.
func parseFlags(help string) []flagDoc {
	var flags []flagDoc
	for _, line := range strings.Split(help, "\n") {
		switch {
		case strings.HasPrefix(line, "  -"):
			name, typ, _ := strings.Cut(strings.TrimPrefix(line, "  -"), " ")
			if t, u, ok := strings.Cut(typ, "\t"); ok { // a short name prints its usage on the line
				typ = strings.TrimSpace(t)
				flags = append(flags, flagDoc{name: name, typ: typ, help: u})
				continue
			}
			flags = append(flags, flagDoc{name: name, typ: strings.TrimSpace(typ)})
		case strings.HasPrefix(line, "    \t") && len(flags) > 0:
			f := &flags[len(flags)-1]
			f.help = strings.TrimSpace(f.help + " " + strings.TrimPrefix(line, "    \t"))
		}
	}
	for i := range flags {
		flags[i].help, flags[i].def = splitDefault(flags[i].help)
		if flags[i].typ == "" {
			flags[i].typ = "bool"
		}
	}
	return flags
}

// splitDefault cuts a trailing "(default X)" off help.
func splitDefault(help string) (string, string) {
	if !strings.HasSuffix(help, ")") {
		return help, ""
	}
	i := strings.LastIndex(help, " (default ")
	if i < 0 {
		return help, ""
	}
	def := strings.TrimSuffix(help[i+len(" (default "):], ")")
	if strings.ContainsAny(def, "()") {
		return help, "" // the usage's own parenthesis, not the flag package's
	}
	if first, _, ok := strings.Cut(def, " "); ok {
		// A Value's usage explains its default: keep the explanation.
		return help, strings.TrimRight(first, ";,")
	}
	return help[:i], strings.Trim(def, `"`)
}

// flagTable writes flags in two columns, the name and type, then the
// description and default, so that the description has the width.
func flagTable(d *doc, flags []flagDoc) {
	rows := make([][]string, len(flags))
	for i, f := range flags {
		flag := name("--" + f.name)
		if f.typ != "value" {
			flag += "<br>" + f.typ
		}
		desc := text(f.help)
		if f.def != "" {
			desc += "<br>**Default:** " + code(f.def)
		}
		rows[i] = []string{flag, desc}
	}
	d.table([]string{"flag", "description"}, "--", rows)
}

// subcommands reads the "commands:" block of the manager's usage.
func subcommands(usage string) [][2]string {
	_, block, _ := strings.Cut(usage, "commands:\n")
	block, _, _ = strings.Cut(block, "\n\n")
	var cmds [][2]string
	for _, line := range strings.Split(block, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 {
			cmds = append(cmds, [2]string{f[0], strings.Join(f[1:], " ")})
		}
	}
	return cmds
}

// managerPages is docs/reference/manager.md.
func managerPages(root string) ([]page, error) {
	dir, err := os.MkdirTemp("", "docgen-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	bin, err := buildManager(root, dir)
	if err != nil {
		return nil, err
	}
	usage := helpOf(bin, "--help")
	cmds := subcommands(usage)
	if len(cmds) == 0 {
		return nil, fmt.Errorf("no commands in the manager's usage:\n%s", usage)
	}
	d := newDoc("the `manager` command's usage and each subcommand's `-h`")
	d.p("# manager")
	d.p("`manager` is Sluice's one binary (the image's entry point); its first argument is the subcommand. Flags take one dash or two (`-listen` or `--listen`), and `manager <command> -h` prints them.")
	rows := make([][]string, len(cmds))
	for i, c := range cmds {
		rows[i] = []string{fmt.Sprintf("[%s](#manager-%s)", name(c[0]), c[0]), text(c[1])}
	}
	d.table([]string{"command", "what it does"}, "--", rows)
	sets := map[string][]flagDoc{}
	for _, c := range cmds {
		d.p("## manager %s", c[0])
		d.p("%s.", upperFirst(c[1]))
		if err := commandSection(d, bin, c[0], sets); err != nil {
			return nil, err
		}
	}
	return []page{{"docs/reference/manager.md", d.Bytes()}}, nil
}

// commandSection writes one subcommand's flags. sets keeps each command's
// flags, so that all, whose flags are controller's and check's together,
// says so rather than repeating them.
func commandSection(d *doc, bin, cmd string, sets map[string][]flagDoc) error {
	switch cmd {
	case "version":
		d.p("It takes no flags.")
		return nil
	case "convert":
		return convertSection(d, bin)
	}
	flags := parseFlags(helpOf(bin, cmd, "-h"))
	if len(flags) == 0 {
		return fmt.Errorf("manager %s -h printed no flags", cmd)
	}
	sets[cmd] = flags
	if cmd == "all" && sameFlags(flags, append(slices.Clone(sets["controller"]), sets["check"]...)) {
		d.p("It takes the flags of [`manager controller`](#manager-controller) and [`manager check`](#manager-check) together.")
		return nil
	}
	flagTable(d, flags)
	return nil
}

// sameFlags reports whether a and b hold the same flags, in any order.
func sameFlags(a, b []flagDoc) bool {
	key := func(fs []flagDoc) []string {
		out := make([]string, 0, len(fs))
		for _, f := range fs {
			out = append(out, f.name+"\x00"+f.def+"\x00"+f.help)
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(key(a), key(b))
}

// convertSection writes each input format of manager convert: its usage
// text and its flags.
func convertSection(d *doc, bin string) error {
	formats := []string{"envoy-ratelimit", "ingress-nginx"}
	for _, f := range formats {
		help := helpOf(bin, "convert", f, "-h")
		text, flags, ok := strings.Cut(help, "\nflags:\n")
		if !ok {
			return fmt.Errorf("manager convert %s -h: no flags section", f)
		}
		d.p("### manager convert %s", f)
		d.p("```text\n%s\n```", strings.TrimSpace(text))
		flagTable(d, parseFlags(flags))
	}
	return nil
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
