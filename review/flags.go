package review

import (
	"path"
	"strings"
)

// hostRunFlags says why a change may run on the host later, outside the
// sandbox: git hooks and config, direnv, editor tasks, build files and
// package manifests' scripts, executable bits and symlinks. Flagged
// changes are listed first.
func hostRunFlags(c Change) []string {
	if c.Kind == Deleted {
		return nil
	}
	var out []string
	add := func(s string) { out = append(out, s) }
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
	switch {
	case strings.Contains("/"+p, "/.git/hooks/") || strings.HasSuffix("/"+p, "/.git/hooks"):
		add("git hook: runs on the host at the next git command")
	case base == ".git" && c.Type != "dir":
		add(".git file: points git at another repository")
	case inDir(".git") && (base == "config" || strings.HasPrefix(p, ".git/info/") || base == "attributes"):
		add("git configuration: can run commands (core.fsmonitor, core.hooksPath, filters, aliases)")
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
	case strings.HasPrefix(p, ".github/workflows/"):
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
