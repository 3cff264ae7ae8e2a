package doccmds

import (
	"bufio"
	"fmt"
	"strings"
)

// Blocks are the fenced `sh` code blocks of a Markdown document after the
// heading section (a line "## section"), up to the next heading of the same
// level, each as its commands: continuation lines joined, comments and blank
// lines dropped.
func Blocks(markdown, section string) ([][]string, error) {
	var (
		blocks   [][]string
		in, code bool
		cur      []string
		pending  string
	)
	s := bufio.NewScanner(strings.NewReader(markdown))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		switch {
		case !code && strings.HasPrefix(line, "## "):
			if in {
				return blocks, nil
			}
			in = strings.TrimSpace(strings.TrimPrefix(line, "## ")) == section
		case in && !code && strings.TrimSpace(line) == "```sh":
			code, cur = true, nil
		case in && code && strings.TrimSpace(line) == "```":
			code = false
			if pending != "" {
				return nil, fmt.Errorf("section %q: a block ends in a continuation line: %q", section, pending)
			}
			blocks = append(blocks, cur)
		case in && code:
			if strings.HasSuffix(line, "\\") {
				pending += strings.TrimSuffix(line, "\\")
				continue
			}
			cmd := strings.TrimSpace(StripComment(pending + line))
			pending = ""
			if cmd != "" {
				cur = append(cur, strings.Join(strings.Fields(cmd), " "))
			}
		}
	}
	if !in && len(blocks) == 0 {
		return nil, fmt.Errorf("no section %q", section)
	}
	return blocks, s.Err()
}

// StripComment is a shell line without its trailing comment: the first # that
// starts a word outside quotes.
func StripComment(line string) string {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i]
		}
	}
	return line
}
