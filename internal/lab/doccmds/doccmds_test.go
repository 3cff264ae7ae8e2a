package doccmds

import (
	"reflect"
	"testing"
)

func TestBlocksAreTheSectionsCommands(t *testing.T) {
	md := "# T\n\n## Quick start\n\ntext\n\n```sh\nmake up      # a comment\nmake test\n```\n\n```go\nignored()\n```\n\n" +
		"```sh\nexport A=1   # the line\nkubectl run x \\\n    --image=busybox -- 'a # b'\n\ncurl x &   # background\n```\n\n## Next\n\n```sh\nnot this\n```\n"
	got, err := Blocks(md, "Quick start")
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"make up", "make test"}, {"export A=1", "kubectl run x --image=busybox -- 'a # b'", "curl x &"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Blocks = %q, want %q", got, want)
	}
	if _, err := Blocks(md, "Missing"); err == nil {
		t.Error("a missing section gave no error")
	}
	if _, err := Blocks("## S\n```sh\na \\\n```\n", "S"); err == nil {
		t.Error("a block ending in a continuation gave no error")
	}
}
