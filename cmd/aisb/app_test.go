package main

import (
	"os"
	"strings"
	"testing"
)

func TestVersionAndCompletion(t *testing.T) {
	code, out, errs := runAisb(t, "", "--version")
	if code != 0 || !strings.HasPrefix(out, "aisb version ") || !strings.Contains(out, "(commit ") {
		t.Errorf("--version: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for shell, want := range map[string]string{"bash": "complete -o default -F _aisb_complete aisb", "zsh": "#compdef aisb", "fish": "complete -c aisb"} {
		code, out, errs := runAisb(t, "", "completion", shell)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, stderr %q, stdout %.200q", shell, code, errs, out)
		}
	}
	if code, _, errs := runAisb(t, "", "completion", "tcsh"); code != 2 || !strings.Contains(errs, "bash, zsh or fish") {
		t.Errorf("completion tcsh: exit %d, stderr %q", code, errs)
	}
	// The words the scripts ask for come from aisb itself (urfave/cli reads
	// the word being completed from os.Args).
	args := os.Args
	os.Args = []string{"aisb", "--generate-bash-completion"}
	defer func() { os.Args = args }()
	if code, out, _ := runAisb(t, "", "--generate-bash-completion"); code != 0 || !strings.Contains(out, "run") || !strings.Contains(out, "doctor") {
		t.Errorf("--generate-bash-completion: exit %d, %q", code, out)
	}
}
