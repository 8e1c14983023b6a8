package session

import (
	"fmt"
	"io"
	"strings"

	"github.com/aisb-dev/aisb/gitdirs"
)

// gitDirMounts are the git directories a worktree or submodule project needs;
// they are mounted besides the project, so stderr says which.
func gitDirMounts(projectDir string, stderr io.Writer) ([]gitdirs.Mount, error) {
	ms, err := gitdirs.Find(projectDir)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, nil
	}
	var list []string
	for _, m := range ms {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		list = append(list, m.Dest+" ("+mode+")")
	}
	fmt.Fprintf(stderr, "aisb: the project's .git points outside it; also mounted: %s\n", strings.Join(list, ", "))
	return ms, nil
}
