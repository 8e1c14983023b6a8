package session

import (
	"strings"

	"github.com/aisb-dev/aisb/internal/project"
)

// gitDirMounts are the git directories a worktree or submodule project needs;
// they are mounted besides the project, so the user is told which. In
// review mode they are all read-only: a write there would bypass the review.
func gitDirMounts(projectDir string, reviewMode bool, logf func(string, ...any)) ([]project.GitMount, error) {
	ms, err := project.GitDirs(projectDir)
	if err != nil || len(ms) == 0 {
		return nil, err
	}
	if reviewMode {
		for i := range ms {
			ms[i].ReadOnly = true
		}
	}
	var list []string
	for _, m := range ms {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		list = append(list, m.Dest+" ("+mode+")")
	}
	logf("the project's .git points outside it; also mounted: %s", strings.Join(list, ", "))
	return ms, nil
}
