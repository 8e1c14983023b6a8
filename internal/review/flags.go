package review

import (
	"path"
	"slices"
	"strings"
)

// hostRunFlags says why a change may run on the host later, outside the
// sandbox: git hooks and config, direnv, editor tasks, build files and
// package manifests' scripts, executable bits and symlinks. Flagged
// changes are listed first.
func hostRunFlags(c Change) []string {
	var out []string
	add := func(s string) { out = append(out, s) }
	if path.Base(c.Path) == ".git" && !c.Within && ((c.Kind == Deleted && c.Type == "dir") || c.OldType == "dir") {
		// Not run on the host, but nothing else loses as much.
		add("deletes a git repository (its history, stashes, unpushed branches)")
	}
	if c.Kind == Deleted {
		return out
	}
	p := c.Path
	base := path.Base(p)
	comps := strings.Split(p, "/")
	inDir := func(d string) bool {
		for _, x := range comps[:len(comps)-1] {
			if x == d {
				return true
			}
		}
		return false
	}
	if base == ".git" && c.Type != "dir" {
		add(".git file: points git at another repository")
	}
	if f := gitFlag(comps); f != "" {
		add(f)
	}
	switch base {
	case ".gitattributes", ".gitmodules":
		add("git attributes/submodules: select filters and fetch code")
	case ".envrc", ".env":
		add("direnv/dotenv: sourced by the shell on cd")
	case "Makefile", "makefile", "GNUmakefile", "Justfile", "justfile", "Taskfile.yml", "Rakefile", "CMakeLists.txt", "meson.build", "build.gradle", "build.gradle.kts", "pom.xml", "BUILD", "BUILD.bazel", "WORKSPACE":
		add("build file: runs at the next build")
	case "package.json":
		add("package manifest: scripts run on install and build")
	case "pyproject.toml", "setup.py", "setup.cfg", "tox.ini", "noxfile.py", "conftest.py", "Pipfile":
		add("python project file: build hooks and test plugins run on the host")
	case "Cargo.toml", "build.rs":
		add("cargo: build scripts run at the next build")
	case "go.mod", "go.work":
		add("go module file: tool directives and replacements")
	case "Gemfile", "composer.json", "mix.exs", "flake.nix", "shell.nix", "default.nix", ".pre-commit-config.yaml", ".npmrc", ".yarnrc", ".yarnrc.yml", ".tool-versions", ".aisb.toml":
		add("project tooling file: read and run by host tools")
	}
	if strings.HasSuffix(base, ".mk") {
		add("build file: runs at the next build")
	}
	switch {
	case inDir(".vscode"), base == ".vscode":
		add("editor config (.vscode): tasks and settings run in your editor")
	case inDir(".idea"), base == ".idea":
		add("editor config (.idea): run configurations in your IDE")
	case inDir(".devcontainer"), base == ".devcontainer":
		add("devcontainer: runs when the project is opened")
	case inDir(".cargo") || inDir(".direnv"):
		add("tool configuration run on the host")
	case strings.HasPrefix(p, ".github/workflows/"), p == ".gitlab-ci.yml":
		add("CI workflow: runs with the repository's secrets")
	case strings.HasPrefix(p, ".husky/"):
		add("husky git hook: runs on the host at the next git command")
	}
	if c.Type == "file" && c.mode&0o111 != 0 && (c.Kind == Added || c.oldMode&0o111 == 0 || c.OldType != "") {
		add("new executable bit")
	}
	if c.Type == "file" && c.mode&0o6000 != 0 {
		add("setuid/setgid bit")
	}
	if c.Type == "symlink" {
		if escapes(p, c.Target) {
			add("symlink pointing outside the project")
		} else {
			add("symlink")
		}
	}
	return out
}

// escapes reports whether symlink p's target leaves the project.
func escapes(p, target string) bool {
	if strings.HasPrefix(target, "/") {
		return true
	}
	depth := strings.Count(p, "/") // directories above the link within the project
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}

// gitData are the paths under a .git directory that git reads as data
// only: objects, refs and logs, the index, the *_HEAD files and messages.
// Anything else there (hooks, config, config.worktree, info/attributes,
// commondir, modules/*/config ...) can make git run a command or read
// another repository, and is flagged.
var gitData = map[string]bool{
	"objects": true, "refs": true, "logs": true, "index": true, "HEAD": true, "ORIG_HEAD": true,
	"FETCH_HEAD": true, "MERGE_HEAD": true, "MERGE_MSG": true, "MERGE_MODE": true, "AUTO_MERGE": true,
	"REBASE_HEAD": true, "CHERRY_PICK_HEAD": true, "REVERT_HEAD": true, "BISECT_LOG": true,
	"COMMIT_EDITMSG": true, "packed-refs": true, "description": true, "shallow": true,
	"gc.log": true, "rr-cache": true, "lost-found": true,
}

// gitFlag is why a path inside a .git directory (the project's, or a
// nested repository's) matters on the host, or "".
func gitFlag(comps []string) string {
	i := slices.Index(comps, ".git")
	if i < 0 || i == len(comps)-1 {
		return ""
	}
	in := comps[i+1:]
	// A submodule's or worktree's git directory has the same layout below
	// modules/NAME or worktrees/NAME.
	for len(in) > 2 && (in[0] == "modules" || in[0] == "worktrees") {
		in = in[2:]
	}
	switch {
	case slices.Contains(in, "hooks"):
		return "git hook: runs on the host at the next git command"
	case strings.HasPrefix(in[len(in)-1], "config"):
		return "git configuration: can run commands (core.fsmonitor, core.hooksPath, filters, aliases)"
	case in[0] == "info":
		return "git attributes/excludes: select filters that run commands"
	case in[0] == "commondir" || in[0] == "gitdir" || (in[0] == "objects" && slices.Contains(in, "alternates")):
		return "git metadata that points at another repository"
	case gitData[in[0]] || (len(in) == 1 && strings.HasSuffix(in[0], "_HEAD")):
		return ""
	}
	return "git metadata: read by git on the host"
}
