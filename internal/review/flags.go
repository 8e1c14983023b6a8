// flags.go is long because it is the list of files that tools run or obey
// on the host, ecosystem by ecosystem, each with the reason the user reads;
// docs/review.md says where each entry comes from.

package review

import (
	"path"
	"slices"
	"strings"
)

// Reasons a change is flagged, as the user reads them.
const (
	whyBuild      = "build file: runs at the next build"
	whyPkg        = "package manifest: scripts run on install and build"
	whyPkgConfig  = "package manager config: chooses registries and runs install hooks"
	whyLock       = "lockfile: chooses the code the next install fetches and runs"
	whyPython     = "python project file: build hooks and test plugins run on the host"
	whyPth        = "python .pth/sitecustomize: its code runs at every start of that Python"
	whyCargo      = "cargo: build scripts run at the next build"
	whyToolchain  = "toolchain file: chooses (and downloads) the compiler or tool the next build runs"
	whyGoMod      = "go module file: tool directives and replacements"
	whyGoGenerate = "go:generate line: go generate runs its command"
	whyWrapper    = "build tool wrapper: downloads and runs the build tool it names (distributionUrl)"
	whyBazel      = "bazel config: flags and commands for every bazel run"
	whyContainer  = "container build/compose file: run by Docker or Podman on the host (mounts, privileges)"
	whyDirenv     = "direnv/dotenv: sourced by the shell on cd"
	whyVersionMgr = "version manager config (mise, asdf, nix): installs and runs tools, mise's hooks on cd"
	whyJSConfig   = "tool config in code: runs when the linter, formatter, bundler or test runner loads it"
	whyLintConfig = "linter/formatter config: loads plugins that run on the host"
	whyEditor     = "editor config: runs when the project is opened (exrc, dir-locals, tasks)"
	whyGitHookMgr = "git hook manager config: runs its commands at the next git command"
	whyTooling    = "project tooling file: read and run by host tools"
	whyCI         = "CI workflow: runs with the repository's secrets (and on your machine with a local runner such as act)"
	whyInstalled  = "installed package: runs when your scripts, tests and tools load it"
	whyVenv       = "virtualenv activation script: sourced by your shell"
	whyTerraform  = "terraform: plan runs its providers and external programs"
)

// byName are files flagged wherever they are, by their exact name.
var byName = map[string]string{
	// git reads these in every worktree.
	".gitattributes": "git attributes/submodules: select filters and fetch code",
	".gitmodules":    "git attributes/submodules: select filters and fetch code",
	".lfsconfig":     "git-lfs config: where git-lfs fetches from and pushes to",
	// direnv and dotenv.
	".envrc": whyDirenv, ".env": whyDirenv,
	// make, cmake, meson, ninja, autotools, scons, waf, task runners.
	"Makefile": whyBuild, "makefile": whyBuild, "GNUmakefile": whyBuild,
	"Makefile.am": whyBuild, "Makefile.in": whyBuild, "configure.ac": whyBuild, "configure.in": whyBuild,
	"CMakeLists.txt": whyBuild, "CMakePresets.json": whyBuild, "CMakeUserPresets.json": whyBuild,
	"meson.build": whyBuild, "meson_options.txt": whyBuild, "meson.options": whyBuild,
	"build.ninja": whyBuild, "SConstruct": whyBuild, "SConscript": whyBuild, "wscript": whyBuild,
	"premake5.lua": whyBuild, "xmake.lua": whyBuild,
	"Justfile": whyBuild, "justfile": whyBuild, ".justfile": whyBuild,
	"Taskfile.yml": whyBuild, "Taskfile.yaml": whyBuild, "taskfile.yml": whyBuild, "taskfile.yaml": whyBuild,
	"Taskfile.dist.yml": whyBuild, "Taskfile.dist.yaml": whyBuild,
	"Rakefile": whyBuild, "rakefile": whyBuild, "Rakefile.rb": whyBuild,
	"Tiltfile": whyBuild, "Earthfile": whyBuild, "Procfile": whyBuild, "Vagrantfile": whyBuild,
	// Gradle, Maven, sbt, Ant.
	"build.gradle": whyBuild, "build.gradle.kts": whyBuild, "settings.gradle": whyBuild, "settings.gradle.kts": whyBuild,
	"init.gradle": whyBuild, "init.gradle.kts": whyBuild, "gradle.properties": whyBuild,
	"gradlew": whyWrapper, "gradlew.bat": whyWrapper, "gradle-wrapper.properties": whyWrapper, "gradle-wrapper.jar": whyWrapper,
	"pom.xml": whyBuild, "mvnw": whyWrapper, "mvnw.cmd": whyWrapper, "maven-wrapper.properties": whyWrapper,
	"build.sbt": whyBuild, "build.xml": whyBuild,
	// Bazel, Buck, Pants, Please.
	"WORKSPACE": whyBuild, "WORKSPACE.bazel": whyBuild, "WORKSPACE.bzlmod": whyBuild, "MODULE.bazel": whyBuild,
	"BUILD": whyBuild, "BUILD.bazel": whyBuild, "BUCK": whyBuild, "BUILD.plz": whyBuild,
	".bazelrc": whyBazel, ".bazelversion": whyToolchain, ".bazeliskrc": whyToolchain,
	".buckconfig": whyBazel, "pants.toml": whyBazel, ".plzconfig": whyBazel,
	// npm, pnpm, yarn, bun, deno.
	"package.json": whyPkg, "bunfig.toml": whyPkgConfig, "deno.json": whyPkg, "deno.jsonc": whyPkg,
	".npmrc": whyPkgConfig, ".yarnrc": whyPkgConfig, ".yarnrc.yml": whyPkgConfig, "pnpm-workspace.yaml": whyPkgConfig,
	".pnpmfile.cjs": "pnpm hook file: runs at every pnpm install", ".pnpmfile.mjs": "pnpm hook file: runs at every pnpm install",
	".pnp.cjs": "yarn Plug'n'Play loader: runs in every node process of the project", ".pnp.loader.mjs": "yarn Plug'n'Play loader: runs in every node process of the project",
	"package-lock.json": whyLock, "npm-shrinkwrap.json": whyLock, "yarn.lock": whyLock, "pnpm-lock.yaml": whyLock,
	"bun.lock": whyLock, "bun.lockb": whyLock, "deno.lock": whyLock,
	".nvmrc": whyToolchain, ".node-version": whyToolchain,
	// Python.
	"pyproject.toml": whyPython, "setup.py": whyPython, "setup.cfg": whyPython, "tox.ini": whyPython,
	"noxfile.py": whyPython, "conftest.py": whyPython, "Pipfile": whyPython, "pytest.ini": whyPython,
	"hatch.toml": whyPython, "mypy.ini": whyPython, ".mypy.ini": whyPython, ".pylintrc": whyPython, "pylintrc": whyPython,
	"sitecustomize.py": whyPth, "usercustomize.py": whyPth, "pyvenv.cfg": whyPth,
	"Pipfile.lock": whyLock, "poetry.lock": whyLock, "uv.lock": whyLock, "pdm.lock": whyLock, "pylock.toml": whyLock,
	".python-version": whyToolchain,
	// Cargo.
	"Cargo.toml": whyCargo, "build.rs": whyCargo, "Cargo.lock": whyLock,
	"rust-toolchain": whyToolchain, "rust-toolchain.toml": whyToolchain,
	// Go.
	"go.mod": whyGoMod, "go.work": whyGoMod,
	// Docker, Podman, compose, devcontainer.
	"Dockerfile": whyContainer, "Containerfile": whyContainer, "docker-bake.hcl": whyContainer,
	"docker-bake.json": whyContainer, ".devcontainer.json": "devcontainer: runs when the project is opened",
	// Version managers and nix.
	".tool-versions": whyVersionMgr, "mise.toml": whyVersionMgr, ".mise.toml": whyVersionMgr,
	"mise.local.toml": whyVersionMgr, ".mise.local.toml": whyVersionMgr, ".rtx.toml": whyVersionMgr,
	"flake.nix": whyVersionMgr, "shell.nix": whyVersionMgr, "default.nix": whyVersionMgr,
	"devenv.nix": whyVersionMgr, "devbox.json": whyVersionMgr, "flake.lock": whyLock,
	// Editors that execute the project's config.
	".dir-locals.el": whyEditor, ".dir-locals-2.el": whyEditor, ".exrc": whyEditor, ".nvimrc": whyEditor,
	".nvim.lua": whyEditor, ".lvimrc": whyEditor, ".vimrc": whyEditor,
	// Linters and formatters whose config loads plugins.
	".eslintrc": whyLintConfig, ".eslintrc.json": whyLintConfig, ".eslintrc.yml": whyLintConfig, ".eslintrc.yaml": whyLintConfig,
	".prettierrc": whyLintConfig, ".prettierrc.json": whyLintConfig, ".prettierrc.yml": whyLintConfig,
	".prettierrc.yaml": whyLintConfig, ".prettierrc.toml": whyLintConfig, ".prettierrc.json5": whyLintConfig,
	".stylelintrc": whyLintConfig, ".stylelintrc.json": whyLintConfig, ".stylelintrc.yml": whyLintConfig, ".stylelintrc.yaml": whyLintConfig,
	".babelrc": whyLintConfig, ".babelrc.json": whyLintConfig, ".mocharc.yml": whyLintConfig, ".mocharc.json": whyLintConfig,
	"tsconfig.json": "TypeScript config: loads language-service plugins in your editor",
	// Git hook managers.
	".pre-commit-config.yaml": whyGitHookMgr, ".pre-commit-config.yml": whyGitHookMgr, ".pre-commit-hooks.yaml": whyGitHookMgr,
	"lefthook.yml": whyGitHookMgr, "lefthook.yaml": whyGitHookMgr, "lefthook.toml": whyGitHookMgr, "lefthook.json": whyGitHookMgr,
	".lefthook.yml": whyGitHookMgr, ".lefthook.yaml": whyGitHookMgr, ".lefthook.toml": whyGitHookMgr, ".lefthook.json": whyGitHookMgr,
	"lefthook-local.yml": whyGitHookMgr, ".lefthook-local.yml": whyGitHookMgr, "lefthook-local.yaml": whyGitHookMgr,
	".overcommit.yml": whyGitHookMgr, ".lintstagedrc": whyGitHookMgr, ".lintstagedrc.json": whyGitHookMgr,
	".lintstagedrc.yml": whyGitHookMgr, ".lintstagedrc.yaml": whyGitHookMgr, ".simple-git-hooks.json": whyGitHookMgr,
	// Ruby, PHP, Elixir, Erlang, Haskell, Perl, Zig, Nim, Swift, .NET, R, Dart.
	"Gemfile": whyPkg, "Gemfile.lock": whyLock, "Guardfile": whyBuild, "Capfile": whyBuild, "Brewfile": whyPkg,
	"composer.json": whyPkg, "composer.lock": whyLock, ".php-cs-fixer.php": whyJSConfig, ".php-cs-fixer.dist.php": whyJSConfig,
	"mix.exs": whyBuild, "mix.lock": whyLock, "rebar.config": whyBuild,
	"Setup.hs": whyBuild, "Setup.lhs": whyBuild, "cabal.project": whyBuild, "stack.yaml": whyBuild,
	"Makefile.PL": whyBuild, "Build.PL": whyBuild, "cpanfile": whyPkg,
	"build.zig": whyBuild, "build.zig.zon": whyBuild, "config.nims": whyBuild,
	"Package.swift": whyBuild, "Package.resolved": whyLock, "Podfile": whyPkg, "Podfile.lock": whyLock,
	"global.json": whyToolchain, "NuGet.config": whyPkgConfig, "nuget.config": whyPkgConfig,
	"Directory.Build.props": whyBuild, "Directory.Build.targets": whyBuild, "Directory.Packages.props": whyBuild,
	".Rprofile":    "R profile: R runs it at start in this directory",
	"pubspec.yaml": whyPkg,
	// Terraform and Ansible.
	".terraformrc": whyTerraform, ".terraform.lock.hcl": whyLock, "ansible.cfg": whyTooling,
	// aisb's own.
	".aisb.toml": whyTooling,
}

// bySuffix are files flagged by how their name ends.
var bySuffix = []struct{ suffix, why string }{
	{".mk", whyBuild}, {".mak", whyBuild}, {".cmake", whyBuild}, {".ninja", whyBuild},
	{".gradle", whyBuild}, {".gradle.kts", whyBuild}, {".bzl", whyBuild}, {".bazelrc", whyBazel},
	{".rake", whyBuild}, {".gemspec", whyPkg}, {".cabal", whyBuild}, {".nimble", whyBuild},
	{".csproj", whyBuild}, {".fsproj", whyBuild}, {".vbproj", whyBuild}, {".props", whyBuild}, {".targets", whyBuild},
	{".sln", whyBuild}, {".pbxproj", whyBuild},
	{".pth", whyPth},
	{".tf", whyTerraform}, {".tf.json", whyTerraform},
	{".code-workspace", "editor workspace: tasks and settings run in your editor"},
	{".sublime-project", "editor workspace: build systems run in your editor"},
}

// codeConfig reports whether base is a tool's config written in code, which
// the tool runs when it loads it: "eslint.config.js", "vite.config.ts",
// ".prettierrc.cjs", ".eslintrc.js" ...
func codeConfig(base string) bool {
	for _, ext := range []string{".js", ".cjs", ".mjs", ".ts", ".cts", ".mts"} {
		stem, ok := strings.CutSuffix(base, ext)
		if !ok {
			continue
		}
		return strings.HasSuffix(stem, ".config") || strings.HasSuffix(stem, "rc") && strings.HasPrefix(stem, ".") ||
			slices.Contains([]string{"karma.conf", "Gruntfile", "gulpfile", "Gulpfile", "Jakefile", ".pnpmfile"}, stem)
	}
	return false
}

// container reports whether base is a Dockerfile or a compose file:
// "Dockerfile.dev", "api.Dockerfile", "docker-compose.override.yml" ...
func container(base string) bool {
	low := strings.ToLower(base)
	if strings.HasPrefix(low, "dockerfile") || strings.HasSuffix(low, ".dockerfile") ||
		strings.HasPrefix(low, "containerfile") || strings.HasSuffix(low, ".containerfile") {
		return true
	}
	return strings.Contains(low, "compose") && (strings.HasSuffix(low, ".yml") || strings.HasSuffix(low, ".yaml"))
}

// inDirs are directories whose every file a host tool runs or obeys,
// wherever they are in the project.
var inDirs = map[string]string{
	".vscode":       "editor config (.vscode): tasks and settings run in your editor",
	".idea":         "editor config (.idea): run configurations in your IDE",
	".zed":          "editor config (.zed): tasks and settings run in your editor",
	".helix":        "editor config (.helix): language servers it starts",
	".devcontainer": "devcontainer: runs when the project is opened",
	".cargo":        "tool configuration run on the host",
	".direnv":       "tool configuration run on the host",
	".husky":        "husky git hook: runs on the host at the next git command",
	".lefthook":     whyGitHookMgr,
	".mvn":          "maven config (.mvn): extensions and JVM options of every build",
	".mise":         whyVersionMgr,
	"buildSrc":      whyBuild,
	".circleci":     whyCI,
	".buildkite":    whyCI,
	".woodpecker":   whyCI,
	"node_modules":  whyInstalled,
	"site-packages": whyInstalled,
}

// hostRunFlags says why a change may run on the host later, outside the
// sandbox, by its name, type and mode alone: git hooks and config, build
// and tool files, package manifests, executable bits and symlinks.
// gitView adds what the repositories' config makes of it. Flagged changes
// are listed first.
func hostRunFlags(c Change) []string {
	var out []string
	add := func(s string) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
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
	dirs := comps[:len(comps)-1]
	if base == ".git" && c.Type != "dir" {
		add(".git file: points git at another repository")
	}
	if f := gitFlag(comps); f != "" {
		add(f)
	}
	if why, ok := byName[base]; ok {
		add(why)
	}
	for _, s := range bySuffix {
		if strings.HasSuffix(base, s.suffix) && base != s.suffix {
			add(s.why)
		}
	}
	if strings.HasPrefix(base, ".env.") {
		add(whyDirenv)
	}
	if strings.HasPrefix(base, "requirements") && strings.HasSuffix(base, ".txt") || base == "constraints.txt" {
		add(whyLock)
	}
	if codeConfig(base) {
		add(whyJSConfig)
	}
	if container(base) {
		add(whyContainer)
	}
	for _, d := range dirs {
		if why, ok := inDirs[d]; ok {
			add(why)
		}
	}
	for _, d := range []string{".vscode", ".idea", ".zed", ".helix", ".devcontainer", ".husky", ".lefthook", ".mvn", ".mise", ".cargo", ".direnv"} {
		if base == d {
			add(inDirs[d])
		}
	}
	switch {
	case hasDirs(dirs, "gradle", "wrapper"), hasDirs(dirs, ".mvn", "wrapper"):
		add(whyWrapper)
	case hasDirs(dirs, "tools") && (base == "bazel" || strings.HasPrefix(base, "bazel.")):
		add("bazel wrapper: bazelisk runs tools/bazel in place of bazel")
	case hasDirs(dirs, "gradle") && base == "libs.versions.toml":
		add(whyLock)
	case hasDirs(dirs, "project") && (strings.HasSuffix(base, ".sbt") || strings.HasSuffix(base, ".scala")):
		add(whyBuild)
	case hasDirs(dirs, ".yarn", "releases"), hasDirs(dirs, ".yarn", "plugins"):
		add("yarn release/plugin: yarn runs it (yarnPath, plugins)")
	case hasDirs(dirs, ".bundle") && base == "config":
		add(whyPkgConfig)
	case hasDirs(dirs, "bin") && (strings.HasPrefix(base, "activate") || base == "Activate.ps1"):
		add(whyVenv)
	}
	if ci(p) {
		add(whyCI)
	}
	if strings.HasSuffix(base, ".go") && goGenerate(c) {
		add(whyGoGenerate)
	}
	if c.Type == "file" && c.mode&0o111 != 0 {
		switch {
		case c.Kind == Added || c.oldMode&0o111 == 0 || c.OldType != "":
			add("new executable bit")
		case c.Kind == Modified:
			add("changed executable: runs wherever it is called")
		}
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

// hasDirs reports whether the directories dirs end with want.
func hasDirs(dirs []string, want ...string) bool {
	return len(dirs) >= len(want) && slices.Equal(dirs[len(dirs)-len(want):], want)
}

// ci reports whether p is a CI pipeline: they run with the repository's
// secrets once pushed, and on the host with a local runner (act, gitlab-ci-local).
func ci(p string) bool {
	for _, d := range []string{".github/workflows/", ".github/actions/", ".gitea/workflows/", ".forgejo/workflows/", ".gitlab/"} {
		if strings.HasPrefix(p, d) {
			return true
		}
	}
	switch p {
	case ".gitlab-ci.yml", ".travis.yml", "Jenkinsfile", "azure-pipelines.yml", "bitbucket-pipelines.yml",
		".drone.yml", ".woodpecker.yml", "appveyor.yml", ".appveyor.yml", ".cirrus.yml", "cloudbuild.yaml", "cloudbuild.yml":
		return true
	}
	return false
}

// goGenerate reports whether a Go file's change adds a //go:generate line,
// whose command go generate runs; a change without a diff (too large,
// binary) cannot be checked and counts.
func goGenerate(c Change) bool {
	if c.Type != "file" || c.Kind == ModeOnly {
		return false
	}
	if c.NoDiff != "" {
		return true
	}
	for _, l := range c.Diff {
		if strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++") && strings.Contains(l, "go:generate") {
			return true
		}
	}
	return false
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
	return gitDirFlag(comps[i+1:])
}

// gitDirFlag is why a path inside a git directory (in: its components
// below it) matters on the host, or "".
func gitDirFlag(in []string) string {
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
