// githooks.go is long because finding where git will look for hooks means
// finding every repository a change may belong to (a .git directory, a .git
// file, a bare repository, a submodule's), reading each one's config as the
// host has it and as the agent left it, and following its includes.

package review

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/internal/safefile"
)

// maxGitConfig bounds a git config file review reads; git's own are a few
// KiB. A larger one is not read, and a change to it says so.
const maxGitConfig = 1 << 20

// maxIncludeDepth is git's own limit on nested config includes;
// maxConfigFiles bounds the config files one listing reads.
const (
	maxIncludeDepth = 10
	maxConfigFiles  = 10_000
)

// gitView is what the project's git repositories make of the agent's
// changes: which directories git will look in for hooks, which paths are
// repositories (bare ones, that no ".git" name marks), which files git
// reads as config, and what review could not vouch for in them.
type gitView struct {
	host, upper *root
	project     string // absolute: absolute hooksPath values are matched against it

	hookDirs map[string]string   // project-relative directory -> why git runs hooks from it
	defaults map[string]string   // each git directory's own hooks/, which gitFlag names already
	hookFile map[string]string   // a file a hook symlink points at -> why
	bare     map[string]bool     // git directories not under a .git name (bare, or one a .git file names)
	configs  map[string]string   // project-relative file -> why it is git config (when not under .git)
	notes    map[string][]string // project-relative config file -> what it does that matters

	user []cfgValue // core.hooksPath of the user's own git config, which applies in every repository

	looked map[string]bool // directories whose .git was looked at
	added  map[string]bool // git directories read
	read   map[string]bool // config files read (includes may loop)
}

// newGitView reads every repository a change may belong to: the project
// root's and each changed path's ancestors' (.git directories and files,
// bare repositories), and known, the git directories recorded at start.
func newGitView(h, u *root, project string, cs []Change, known []string) *gitView {
	g := &gitView{
		host: h, upper: u, project: project,
		hookDirs: map[string]string{}, defaults: map[string]string{}, hookFile: map[string]string{},
		bare: map[string]bool{}, configs: map[string]string{},
		notes: map[string][]string{}, looked: map[string]bool{}, added: map[string]bool{}, read: map[string]bool{},
	}
	g.user = userHooksPaths()
	g.enclosingRepo()
	g.lookAt("")
	for _, k := range known {
		if checkRel(k) != nil {
			continue
		}
		if path.Base(k) == ".git" {
			g.lookAt(parentDir(k))
		} else {
			g.addGitDir(k, "", false)
		}
	}
	for _, c := range cs {
		comps := strings.Split(c.Path, "/")
		for i := range comps {
			g.lookAt(strings.Join(comps[:i], "/"))
		}
	}
	g.followHookLinks()
	return g
}

// followHookLinks adds what symlinks make of the hook directories: git
// follows a hooks directory that is a link (or lies below one), and a hook
// that is a link (.git/hooks/pre-commit -> ../../scripts/pre-commit), so
// the file at the end of either is a hook too. Links are read as the agent
// left them and as the host has them.
func (g *gitView) followHookLinks() {
	dirs := map[string]string{}
	for d, why := range g.hookDirs {
		dirs[d] = why
	}
	for d, why := range g.defaults {
		dirs[d] = why
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		why := dirs[d]
		reals := []string{d}
		for _, r := range g.realPaths(d) {
			if r != d {
				reals = append(reals, r)
				if _, ok := g.hookDirs[r]; !ok {
					g.hookDirs[r] = why + " (through the symlink " + Quote(d) + ")"
				}
			}
		}
		for _, rd := range reals {
			for _, n := range g.names(rd) {
				for _, t := range g.realPaths(join(rd, n)) {
					if t != join(rd, n) {
						if _, ok := g.hookFile[t]; !ok {
							g.hookFile[t] = "git hook (linked from " + Quote(join(d, n)) + "): runs on the host at the next git command"
						}
					}
				}
			}
		}
	}
}

// maxLinkHops is how many symlinks realPaths follows for one path (the
// kernel's own limit is 40).
const maxLinkHops = 40

// realPaths is rel with every symlink on the way resolved inside the
// project, as the agent's layer over the host shows it and as the host
// alone has it; a path that leaves the project, or loops, has none.
func (g *gitView) realPaths(rel string) []string {
	var out []string
	for _, hostOnly := range []bool{false, true} {
		if p, ok := g.follow(rel, hostOnly); ok && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func (g *gitView) follow(rel string, hostOnly bool) (string, bool) {
	comps := splitRel(rel)
	done := ""
	for hops := 0; len(comps) > 0; {
		next := join(done, comps[0])
		comps = comps[1:]
		t, ok := g.link(next, hostOnly)
		if !ok {
			done = next
			continue
		}
		if hops++; hops > maxLinkHops {
			return "", false
		}
		r, inside := g.resolve(parentDir(next), t)
		if !inside {
			return "", false
		}
		comps = append(splitRel(r), comps...)
		done = ""
	}
	return done, true
}

func splitRel(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// link is rel's symlink target: in the layer if it holds rel (a whiteout
// holds no link), else on the host; with hostOnly, on the host.
func (g *gitView) link(rel string, hostOnly bool) (string, bool) {
	if !hostOnly {
		if st, ok, err := g.upper.lstat(rel); err == nil && ok {
			if st.Mode&unix.S_IFMT != unix.S_IFLNK {
				return "", false
			}
			t, err := g.upper.readlink(rel)
			return t, err == nil
		}
	}
	if st, ok, err := g.host.lstat(rel); err == nil && ok && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		t, err := g.host.readlink(rel)
		return t, err == nil
	}
	return "", false
}

func parentDir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// lookAt reads the repository of directory dir: dir/.git as a directory or
// as a file naming a git directory, or dir itself when it is one.
func (g *gitView) lookAt(dir string) {
	if g.looked[dir] {
		return
	}
	g.looked[dir] = true
	dotgit := join(dir, ".git")
	for _, r := range []*root{g.upper, g.host} {
		st, ok, err := r.lstat(dotgit)
		if err != nil || !ok {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			g.addGitDir(dotgit, dir, true)
		case unix.S_IFLNK:
			// A .git symlink: git follows it, review reads where it points.
			if t, err := r.readlink(dotgit); err == nil {
				if rel, inside := g.resolve(dir, t); inside && rel != "" {
					g.addGitDir(rel, dir, true)
				}
			}
		case unix.S_IFREG:
			b, err := readRel(r, dotgit, 4096)
			if err != nil {
				continue
			}
			gd, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
			if !ok {
				continue
			}
			gd = strings.TrimSpace(gd)
			if rel, inside := g.resolve(dir, gd); inside {
				g.addGitDir(rel, dir, true)
			} else if filepath.IsAbs(gd) {
				g.outsideGitDir(filepath.Clean(gd), dir)
			}
		}
	}
	// A bare repository, or a git directory inside a .git (a submodule's,
	// whose name may hold slashes: .git/modules/libs/foo; a worktree's).
	if path.Base(dir) != ".git" && g.looksLikeGitDir(dir) {
		g.addGitDir(dir, "", false)
	}
}

// looksLikeGitDir is git's test of a git directory (setup.c,
// is_git_directory): a HEAD, and objects and refs or a commondir, in the
// layer or on the host.
func (g *gitView) looksLikeGitDir(dir string) bool {
	return g.exists(join(dir, "HEAD")) && (g.isDir(join(dir, "objects")) || g.isDir(join(dir, "refs")) || g.exists(join(dir, "commondir")))
}

// exists and isDir look in the agent's layer (a whiteout is not there) and
// on the host: either one is enough, since review does not know which of
// them git will see.
func (g *gitView) exists(rel string) bool {
	for _, r := range []*root{g.upper, g.host} {
		if st, ok, err := r.lstat(rel); err == nil && ok && !(st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0) {
			return true
		}
	}
	return false
}

func (g *gitView) isDir(rel string) bool {
	for _, r := range []*root{g.upper, g.host} {
		if st, ok, err := r.lstat(rel); err == nil && ok && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return true
		}
	}
	return false
}

// addGitDir reads git directory gd's config files; top is its worktree's
// top when hasTop. Git runs hooks from gd/hooks, or from core.hooksPath,
// which a relative value resolves against the worktree's top (githooks(5):
// "the root of the working tree in a non-bare repository", else $GIT_DIR).
// Review takes every base it may be: the top, gd itself, and each
// core.worktree.
func (g *gitView) addGitDir(gd, top string, hasTop bool) {
	if g.added[gd] {
		return
	}
	g.added[gd] = true
	if !slices.Contains(strings.Split(gd, "/"), ".git") {
		g.bare[gd] = true
	}
	var found []cfgValue
	files := []string{join(gd, "config"), join(gd, "config.worktree")}
	for _, wt := range g.names(join(gd, "worktrees")) {
		files = append(files, join(gd, "worktrees/"+wt+"/config.worktree"))
	}
	for _, f := range files {
		found = append(found, g.readConfig(f, 0)...)
	}
	g.defaults[join(gd, "hooks")] = "git hook: runs on the host at the next git command"
	bases := []string{gd}
	if hasTop {
		bases = append(bases, top)
	}
	for _, v := range found {
		if v.key != "worktree" {
			continue
		}
		if rel, inside := g.resolve(gd, v.value); inside {
			bases = append(bases, rel)
		}
	}
	for _, v := range append(found, g.user...) {
		if v.key == "hookspath" {
			g.hooksPath(v, bases)
		}
	}
	for _, m := range g.names(join(gd, "modules")) {
		g.addGitDir(join(gd, "modules/"+m), "", false)
	}
}

// names lists directory rel in the layer and on the host.
func (g *gitView) names(rel string) []string {
	var out []string
	for _, r := range []*root{g.upper, g.host} {
		if st, ok, err := r.lstat(rel); err != nil || !ok || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		ns, err := r.readDir(rel)
		if err != nil {
			continue
		}
		for _, n := range ns {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

// cfgValue is one value that matters, and the config file it came from.
type cfgValue struct {
	file, key, value string
}

// readConfig reads config file rel as the host has it and as the agent
// left it, and the files it includes, and returns their values.
func (g *gitView) readConfig(rel string, depth int) []cfgValue {
	if g.read[rel] {
		return nil
	}
	g.read[rel] = true
	var out []cfgValue
	var agents []cfgSetting // what the agent's version makes git run
	defer func() { g.noteNewCommands(rel, agents) }()
	for _, r := range []*root{g.upper, g.host} {
		if st, ok, err := r.lstat(rel); err != nil || !ok || (r == g.upper && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0) {
			continue // not there, or deleted by the agent (a whiteout)
		}
		b, err := readRel(r, rel, maxGitConfig)
		if err != nil {
			if r == g.upper && !absent(err) && !errors.Is(err, os.ErrNotExist) {
				g.note(rel, "git configuration review could not read ("+readProblem(err)+"): where it sends git for hooks is unknown; check it by hand")
			}
			continue
		}
		cfg := parseGitConfig(b)
		if r == g.upper {
			if cfg.odd {
				g.note(rel, "git configuration in a form review does not follow (or naming hooksPath outside a value): check it by hand")
			}
			agents = cfg.commands
		} else {
			agents = slices.DeleteFunc(agents, func(c cfgSetting) bool { return slices.Contains(cfg.commands, c) })
		}
		for _, v := range cfg.hooksPath {
			out = append(out, cfgValue{rel, "hookspath", v})
		}
		for _, v := range cfg.worktree {
			out = append(out, cfgValue{rel, "worktree", v})
		}
		for _, inc := range cfg.include {
			incRel, inside := g.resolve(parentDir(rel), inc)
			if !inside {
				g.note(rel, fmt.Sprintf("git configuration includes %s, outside the project: not reviewed", Quote(inc)))
				continue
			}
			if depth >= maxIncludeDepth || len(g.read) >= maxConfigFiles {
				g.note(rel, fmt.Sprintf("git configuration with includes past what review reads (%d deep, %d files): check it by hand", maxIncludeDepth, maxConfigFiles))
				continue
			}
			if _, ok := g.configs[incRel]; !ok {
				g.configs[incRel] = "git configuration (included by " + Quote(rel) + "): can run commands (core.fsmonitor, core.hooksPath, filters, aliases)"
			}
			out = append(out, g.readConfig(incRel, depth+1)...)
		}
	}
	return out
}

// noteNewCommands names, on config file rel, the variables the agent's
// version sets that make git run a program and the host's does not set so.
func (g *gitView) noteNewCommands(rel string, set []cfgSetting) {
	var names []string
	for _, c := range set {
		if q := Quote(c.name); !slices.Contains(names, q) {
			names = append(names, q)
		}
	}
	if len(names) > 0 {
		g.note(rel, "sets what git runs: "+strings.Join(names, ", "))
	}
}

// hooksPath records where core.hooksPath v sends git for hooks.
func (g *gitView) hooksPath(v cfgValue, bases []string) {
	why := fmt.Sprintf("git hook (core.hooksPath %s in %s): runs on the host at the next git command", Quote(v.value), Quote(v.file))
	if strings.TrimSpace(v.value) == "" {
		return
	}
	for _, b := range bases {
		rel, inside := g.resolve(b, v.value)
		if !inside {
			g.note(v.file, fmt.Sprintf("core.hooksPath %s points outside the project: git runs hooks from there, which this review cannot show", Quote(v.value)))
			continue
		}
		if _, ok := g.hookDirs[rel]; !ok {
			g.hookDirs[rel] = why
		}
	}
}

// resolve is value as git reads a path in dir: inside is false for one that
// leaves the project ("..", an absolute path elsewhere, "~", "%(prefix)").
func (g *gitView) resolve(dir, value string) (rel string, inside bool) {
	switch {
	case value == "":
		return "", false
	case strings.HasPrefix(value, "~") || strings.HasPrefix(value, "%("):
		return "", false
	case filepath.IsAbs(value):
		v := filepath.Clean(value)
		if v == g.project {
			return "", true
		}
		r, ok := strings.CutPrefix(v, g.project+"/")
		return r, ok
	}
	j := path.Join(dir, value)
	if j == ".." || strings.HasPrefix(j, "../") {
		return "", false
	}
	if j == "." {
		j = ""
	}
	return j, true
}

func (g *gitView) note(rel, why string) {
	if !slices.Contains(g.notes[rel], why) {
		g.notes[rel] = append(g.notes[rel], why)
	}
}

// outsideGitDir reads the config of a git directory outside the project
// that a .git file names (a worktree's or a submodule's): the sandbox had
// it read-only, but a relative core.hooksPath there still sends git to a
// directory of the project. It is the user's own, read as safefile reads.
func (g *gitView) outsideGitDir(gd, top string) {
	if g.added[gd] {
		return
	}
	g.added[gd] = true
	files := []string{filepath.Join(gd, "config"), filepath.Join(gd, "config.worktree")}
	if b, err := safefile.Read(filepath.Join(gd, "commondir"), 4096); err == nil {
		common := strings.TrimSpace(string(b))
		if !filepath.IsAbs(common) {
			common = filepath.Join(gd, common)
		}
		files = append(files, filepath.Join(common, "config"))
	}
	for _, f := range files {
		b, err := safefile.Read(f, maxGitConfig)
		if err != nil {
			continue
		}
		for _, v := range parseGitConfig(b).hooksPath {
			g.hooksPath(cfgValue{file: f, key: "hookspath", value: v}, []string{top})
		}
	}
}

// enclosingRepo reads the repository the project lies in, when the
// project is a directory below a worktree's top (git looks up the parents
// for a .git): a core.hooksPath there, relative to that top, may name a
// directory of the project. The repository is the user's and outside the
// project, so the agent could not change its config.
func (g *gitView) enclosingRepo() {
	for d := filepath.Dir(g.project); ; d = filepath.Dir(d) {
		fi, err := os.Lstat(filepath.Join(d, ".git"))
		if err == nil {
			var gds []string
			switch {
			case fi.IsDir():
				gds = []string{filepath.Join(d, ".git")}
			case fi.Mode().IsRegular():
				if b, err := safefile.Read(filepath.Join(d, ".git"), 4096); err == nil {
					if gd, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:"); ok {
						gd = strings.TrimSpace(gd)
						if !filepath.IsAbs(gd) {
							gd = filepath.Join(d, gd)
						}
						gds = []string{gd}
						if c, err := safefile.Read(filepath.Join(gd, "commondir"), 4096); err == nil {
							common := strings.TrimSpace(string(c))
							if !filepath.IsAbs(common) {
								common = filepath.Join(gd, common)
							}
							gds = append(gds, common)
						}
					}
				}
			}
			var vs []cfgValue
			for _, gd := range gds {
				for _, f := range []string{filepath.Join(gd, "config"), filepath.Join(gd, "config.worktree")} {
					if b, err := safefile.Read(f, maxGitConfig); err == nil {
						for _, v := range parseGitConfig(b).hooksPath {
							vs = append(vs, cfgValue{file: f, key: "hookspath", value: v})
						}
					}
				}
			}
			for _, v := range append(vs, g.user...) {
				abs := v.value
				if !filepath.IsAbs(abs) && !strings.HasPrefix(abs, "~") {
					abs = filepath.Join(d, abs)
				}
				if rel, inside := g.resolve("", abs); inside {
					if _, ok := g.hookDirs[rel]; !ok {
						g.hookDirs[rel] = fmt.Sprintf("git hook (core.hooksPath %s in %s): runs on the host at the next git command", Quote(v.value), Quote(v.file))
					}
				}
			}
			return
		}
		if d == "/" || d == "." {
			return
		}
	}
}

// readRel reads rel below r as safefile reads: no link followed on the way
// or at the end (each directory is opened with O_NOFOLLOW from r, the file
// by safefile through that directory's descriptor), no FIFO, at most max bytes.
func readRel(r *root, rel string, max int64) ([]byte, error) {
	pfd, base, err := r.parent(rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	b, err := safefile.Read(fmt.Sprintf("/proc/self/fd/%d/%s", pfd, base), max)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			pe.Path = Quote(rel)
		}
		return nil, err
	}
	return b, nil
}

// readProblem names why a config could not be read, for the user.
func readProblem(err error) string {
	switch {
	case errors.Is(err, safefile.ErrSymlink):
		return "a symbolic link, not followed"
	case errors.Is(err, safefile.ErrTooLarge):
		return fmt.Sprintf("larger than %d KiB", maxGitConfig>>10)
	case errors.Is(err, safefile.ErrNotRegular):
		return "not a regular file"
	}
	return "unreadable"
}

// hookFlags are the reasons git runs a change as a hook, or reads it as
// part of a git directory no ".git" name marks: listed before the rest.
func (g *gitView) hookFlags(c Change) []string {
	if g == nil || c.Kind == Deleted {
		return nil
	}
	var out []string
	if why, ok := g.hookDirs[parentDir(c.Path)]; ok && c.Type != "dir" {
		out = append(out, why)
	}
	if why, ok := g.hookFile[c.Path]; ok {
		out = append(out, why)
	}
	if !slices.Contains(strings.Split(c.Path, "/"), ".git") {
		comps := strings.Split(c.Path, "/")
		for i := len(comps) - 1; i >= 0; i-- {
			if gd := strings.Join(comps[:i], "/"); g.bare[gd] {
				if f := gitDirFlag(comps[i:]); f != "" {
					where := "the project is a git directory: "
					if gd != "" {
						where = "in the git directory " + Quote(gd) + ": "
					}
					out = append(out, where+f)
				}
				break
			}
		}
	}
	return out
}

// configFlags are the reasons git reads a change as config (included by
// another), and what review found in that config.
func (g *gitView) configFlags(c Change) []string {
	if g == nil || c.Kind == Deleted {
		return nil
	}
	var out []string
	if why, ok := g.configs[c.Path]; ok {
		out = append(out, why)
	}
	return append(out, g.notes[c.Path]...)
}

// userGitConfigs are the user's own git config files, as git finds them
// (git-config(1), FILES): the system's, then the global one
// (GIT_CONFIG_GLOBAL, or $XDG_CONFIG_HOME/git/config and ~/.gitconfig).
// A variable, for tests.
var userGitConfigs = func() []string {
	files := []string{"/etc/gitconfig"}
	if g := os.Getenv("GIT_CONFIG_GLOBAL"); g != "" {
		return append(files, g)
	}
	home, _ := os.UserHomeDir()
	xdg := os.Getenv("XDG_CONFIG_HOME")
	if xdg == "" && home != "" {
		xdg = filepath.Join(home, ".config")
	}
	if xdg != "" {
		files = append(files, filepath.Join(xdg, "git/config"))
	}
	if home != "" {
		files = append(files, filepath.Join(home, ".gitconfig"))
	}
	return files
}

// userHooksPaths reads core.hooksPath from the user's own git config: a
// relative value there sends git to a directory of every repository's
// worktree. These files are the user's (a link into a dotfiles repository
// is followed), read within the same cap.
func userHooksPaths() []cfgValue {
	var out []cfgValue
	home, _ := os.UserHomeDir()
	for _, f := range userGitConfigs() {
		b, err := safefile.ReadFollow(f, maxGitConfig)
		if err != nil {
			continue
		}
		name := f
		if home != "" && strings.HasPrefix(f, home+"/") {
			name = "~/" + strings.TrimPrefix(f, home+"/")
		}
		for _, v := range parseGitConfig(b).hooksPath {
			out = append(out, cfgValue{file: name, key: "hookspath", value: v})
		}
	}
	return out
}
