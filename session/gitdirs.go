package session

import (
	"strings"

	"github.com/aisb-dev/aisb/gitdirs"
)

// gitDirMounts are the git directories a worktree or submodule project needs;
// they are mounted besides the project, so the user is told which.
func gitDirMounts(projectDir string, logf func(string, ...any)) ([]gitdirs.Mount, error) {
	ms, err := gitdirs.Find(projectDir)
	if err != nil || len(ms) == 0 {
		return nil, err
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
