package resolve

import "strings"

// expand replaces the $(VAR) references of input as the kubelet does (its fork of
// Go's os.Expand): $$ is an escaped $, a reference mapping does not know is left as
// written, and an unterminated $( is copied as is.
func expand(input string, mapping func(string) (string, bool)) string {
	var b strings.Builder
	checkpoint := 0
	for cursor := 0; cursor < len(input); cursor++ {
		if input[cursor] != '$' || cursor+1 >= len(input) {
			continue
		}
		b.WriteString(input[checkpoint:cursor])
		read, isVar, advance := readVariableName(input[cursor+1:])
		if isVar {
			if v, ok := mapping(read); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + read + ")")
			}
		} else {
			b.WriteString(read)
		}
		cursor += advance
		checkpoint = cursor + 1
	}
	return b.String() + input[checkpoint:]
}

// readVariableName reads what follows a $: the name of a $(name) reference, an
// escaped $, or anything else, which is copied with the $.
func readVariableName(input string) (read string, isVar bool, advance int) {
	switch input[0] {
	case '$':
		return "$", false, 1
	case '(':
		for i := 1; i < len(input); i++ {
			if input[i] == ')' {
				return input[1:i], true, i + 1
			}
		}
		return "$(", false, 1
	default:
		return "$" + input[0:1], false, 1
	}
}
