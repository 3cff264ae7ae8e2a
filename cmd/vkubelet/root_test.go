package main

import (
	"io"
	"strings"
	"testing"
)

func TestTheLabsCommandsNameVkubeletctl(t *testing.T) {
	for _, args := range [][]string{{"up", "--nodes", "3"}, {"bench", "--pods", "200"}, {"controlplane", "build"}} {
		cmd := newRootCommand()
		cmd.SetArgs(args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		want := "run vkubeletctl " + strings.Join(args, " ")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("vkubelet %s: err = %v, want one saying %q", strings.Join(args, " "), err, want)
		}
	}
}
