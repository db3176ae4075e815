package convert

import (
	"regexp"
	"strconv"

	yaml "go.yaml.in/yaml/v3"
)

var lineInError = regexp.MustCompile(`line (\d+)`)

// DecodeErrorPos is where in file a YAML decoding error is: the line it
// names, or the file alone.
func DecodeErrorPos(file string, err error) Pos {
	pos := Pos{File: file}
	if m := lineInError.FindStringSubmatch(err.Error()); m != nil {
		pos.Line, _ = strconv.Atoi(m[1])
	}
	return pos
}

// Deref is the node an alias stands for (n itself when it is no alias).
func Deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}
