package sluicectl

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// visible is s as it may be shown to a person in a terminal. Key values
// come from clients' headers and queries, and every string of an answer
// or a server's message may hold them: a terminal would act on their
// control bytes (clear the screen, set colors, a newline that forges a table
// row), and bidi overrides, invisible characters and invalid UTF-8 would
// make one value look like another. So a value that prints as itself is
// shown unchanged, and any other is quoted with Go's escapes
// ("a\x1b[2Jb", "abc\u202e"), which strconv.Unquote reads back: two
// values never look alike. Quoted too are the empty value, one with
// leading, trailing or doubled spaces (which a table's columns would
// hide or split), one that starts with a quote (which would read as
// another's quoted form) and one that reads as a table's placeholder
// ("-", "(missing)").
func visible(s string) shown {
	if !needsQuotes(s) {
		return shown(s)
	}
	return quote(s)
}

// visibleText is a message as it may be shown: unchanged when every
// character prints, else quoted as visible quotes a value. Unlike a
// value, a message needs no quotes for its spaces or a quote it starts
// with (it quotes values itself).
func visibleText(s string) shown {
	if printsAll(s) {
		return shown(s)
	}
	return quote(s)
}

// quote is s quoted with Go's escapes for every character that does not
// print as itself.
func quote(s string) shown {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == ' ' || prints(r):
			b.WriteRune(r)
		default:
			writeEscape(&b, r)
		}
		s = s[size:]
	}
	b.WriteByte('"')
	return shown(b.String())
}

// shown is text fit for a terminal: made visible, or the plugin's own.
// Tables take only shown cells, so no value reaches one unescaped.
type shown string

// needsQuotes reports whether the value s would not show as itself.
func needsQuotes(s string) bool {
	return s == "" || s == "-" || s == missingKey || s[0] == '"' || s[0] == ' ' || s[len(s)-1] == ' ' ||
		strings.Contains(s, "  ") || !printsAll(s)
}

// printsAll reports whether every character of s prints as itself (or is
// an ASCII space).
func printsAll(s string) bool {
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && size == 1 || r != ' ' && !prints(r) {
			return false
		}
		s = s[size:]
	}
	return true
}

// prints reports whether r shows as a visible character of its own: a
// letter, mark, number, punctuation or symbol (no control, format, space
// or separator character) that Unicode does not mark as ignorable
// (Default_Ignorable_Code_Point: fillers, variation selectors, tags),
// which terminals draw as nothing.
func prints(r rune) bool {
	return unicode.IsPrint(r) && r != ' ' && !hidden(r)
}

// hidden reports the characters unicode.IsPrint takes that show nothing.
func hidden(r rune) bool {
	return unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || unicode.Is(unicode.Variation_Selector, r)
}

// writeEscape writes r as Go escapes it in a quoted string.
func writeEscape(b *strings.Builder, r rune) {
	switch r {
	case '\a':
		b.WriteString(`\a`)
	case '\b':
		b.WriteString(`\b`)
	case '\f':
		b.WriteString(`\f`)
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	case '\t':
		b.WriteString(`\t`)
	case '\v':
		b.WriteString(`\v`)
	default:
		switch {
		case r < utf8.RuneSelf:
			fmt.Fprintf(b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
}

// writef writes format with every string argument made visible (shown
// ones are already): the one way renderers print a line. Errors print
// with writef too, their message made visibleText.
func writef(w io.Writer, format string, args ...any) error {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = visible(s)
		}
	}
	_, err := fmt.Fprintf(w, format, args...)
	return err
}
