package review

import (
	"bytes"
	"slices"
	"strings"
)

// gitConfig is what review needs of one git config file: the values that
// choose where git looks for hooks, where its worktree is, and which other
// config files it reads.
type gitConfig struct {
	hooksPath []string // every core.hooksPath, in order (git uses the last)
	worktree  []string // every core.worktree
	include   []string // include.path and includeIf.*.path, every one
	// commands are the variables set that make git run a program
	// ("core.fsmonitor", "alias.co", "filter.lfs.smudge" ...), with their values.
	commands []cfgSetting
	// odd is set when the text holds a line this reader does not follow, or
	// names hooksPath where it took no value: git might read it otherwise,
	// so the file cannot be vouched for.
	odd bool
}

// parseGitConfig reads git's config syntax (git-config(1), CONFIGURATION
// FILE): "[section]" or "[section "subsection"]" headers (also the old
// "[section.subsection]"), then "name = value" or a bare "name" (true).
// Section and variable names are case-insensitive, subsections are not.
// A value may hold "double quotes", the escapes \" \\ \n \t \b, and a
// backslash before the line end continues it; '#' and ';' outside quotes
// start a comment. All conditions of includeIf are taken as true: review
// cannot know where git will run.
func parseGitConfig(b []byte) gitConfig {
	var g gitConfig
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // git skips a UTF-8 byte order mark
	p := &cfgParser{b: b}
	section, sub := "", ""
	keys := 0 // hooksPath keys read, in any section
	for !p.eof() {
		p.skipSpace()
		if p.eof() {
			break
		}
		c := p.b[p.i]
		switch {
		case c == '\n':
			p.i++
		case c == '#' || c == ';':
			p.skipLine()
		case c == '[':
			var ok bool
			if section, sub, ok = p.header(); !ok {
				g.odd = true
				p.skipLine()
				section, sub = "", ""
			}
		case isKeyStart(c):
			name := p.name()
			p.skipSpace()
			value, hasValue := "", false
			if !p.eof() && p.b[p.i] == '=' {
				p.i++
				value, hasValue = p.value(), true
			} else {
				p.skipLine()
			}
			key := strings.ToLower(name)
			if key == "hookspath" {
				keys++
			}
			if runsCommand(section, key) {
				full := section + "." + key
				if sub != "" {
					full = section + "." + sub + "." + key
				}
				g.commands = append(g.commands, cfgSetting{full, value})
			}
			switch {
			case section == "core" && sub == "" && key == "hookspath" && hasValue:
				g.hooksPath = append(g.hooksPath, value)
			case section == "core" && sub == "" && key == "worktree" && hasValue:
				g.worktree = append(g.worktree, value)
			case section == "include" && sub == "" && key == "path" && hasValue,
				section == "includeif" && key == "path" && hasValue:
				g.include = append(g.include, value)
			}
		default:
			g.odd = true
			p.skipLine()
		}
	}
	// What this reader took is checked against the raw text: a file that
	// names hooksPath more often than it yielded values (in a comment, or
	// in a syntax git may read otherwise) cannot be vouched for.
	if bytes.Count(bytes.ToLower(b), []byte("hookspath")) > keys {
		g.odd = true
	}
	return g
}

type cfgParser struct {
	b []byte
	i int
}

func (p *cfgParser) eof() bool { return p.i >= len(p.b) }

func (p *cfgParser) skipSpace() {
	for !p.eof() && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *cfgParser) skipLine() {
	for !p.eof() && p.b[p.i] != '\n' {
		p.i++
	}
}

func isKeyStart(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isKeyChar(c byte) bool { return isKeyStart(c) || c >= '0' && c <= '9' || c == '-' }

func (p *cfgParser) name() string {
	s := p.i
	for !p.eof() && isKeyChar(p.b[p.i]) {
		p.i++
	}
	return string(p.b[s:p.i])
}

// header reads "[section]", "[section "sub"]" or "[section.sub]"; what
// follows the ']' on the line is read as the next entry, as git does.
func (p *cfgParser) header() (section, sub string, ok bool) {
	p.i++ // '['
	s := p.i
	for !p.eof() && (isKeyChar(p.b[p.i]) || p.b[p.i] == '.') {
		p.i++
	}
	name := strings.ToLower(string(p.b[s:p.i]))
	if name == "" {
		return "", "", false
	}
	if dot := strings.IndexByte(name, '.'); dot >= 0 {
		// The old form: the subsection is lower-cased too.
		section, sub = name[:dot], name[dot+1:]
		if p.eof() || p.b[p.i] != ']' {
			return "", "", false
		}
		p.i++
		return section, sub, true
	}
	section = name
	p.skipSpace()
	if p.eof() {
		return "", "", false
	}
	if p.b[p.i] == ']' {
		p.i++
		return section, "", true
	}
	if p.b[p.i] != '"' {
		return "", "", false
	}
	p.i++
	var sb strings.Builder
	for {
		if p.eof() || p.b[p.i] == '\n' {
			return "", "", false
		}
		c := p.b[p.i]
		p.i++
		if c == '"' {
			break
		}
		if c == '\\' {
			if p.eof() || p.b[p.i] == '\n' {
				return "", "", false
			}
			c = p.b[p.i]
			p.i++
		}
		sb.WriteByte(c)
	}
	if p.eof() || p.b[p.i] != ']' {
		return "", "", false
	}
	p.i++
	return section, sb.String(), true
}

// value reads a value to the end of its line (or comment), as git does:
// leading and trailing blanks outside quotes dropped, inner ones kept.
func (p *cfgParser) value() string {
	var sb strings.Builder
	quoted := false
	spaces := 0
	started := false
	for !p.eof() {
		c := p.b[p.i]
		p.i++
		switch {
		case c == '\n':
			return sb.String()
		case !quoted && (c == ' ' || c == '\t' || c == '\r'):
			if started {
				spaces++
			}
			continue
		case !quoted && (c == '#' || c == ';'):
			p.skipLine()
			return sb.String()
		}
		if spaces > 0 {
			sb.WriteString(strings.Repeat(" ", spaces))
			spaces = 0
		}
		switch c {
		case '"':
			quoted = !quoted
			started = true
		case '\\':
			if p.eof() {
				return sb.String()
			}
			e := p.b[p.i]
			p.i++
			switch e {
			case '\n':
				continue // a continued line
			case 'n':
				sb.WriteByte('\n')
			case 't':
				sb.WriteByte('\t')
			case 'b':
				sb.WriteByte('\b')
			default:
				sb.WriteByte(e)
			}
			started = true
		default:
			sb.WriteByte(c)
			started = true
		}
	}
	return sb.String()
}

// commandKeys are the variables whose value git runs as a command
// (git-config(1)), by section, then by variable ("" for any subsection).
var commandKeys = map[string][]string{
	"core":        {"fsmonitor", "sshcommand", "pager", "editor", "askpass", "gitproxy", "hookspath", "worktree"},
	"sequence":    {"editor"},
	"gpg":         {"program"},
	"credential":  {"helper"},
	"filter":      {"clean", "smudge", "process"},
	"diff":        {"textconv", "command", "external"},
	"merge":       {"driver"},
	"difftool":    {"cmd", "path"},
	"mergetool":   {"cmd", "path"},
	"uploadpack":  {"packobjectshook"},
	"remote":      {"uploadpack", "receivepack", "proxy", "vcs"},
	"url":         {"insteadof", "pushinsteadof"},
	"submodule":   {"update"},
	"interactive": {"difffilter"},
	"web":         {"browser"},
	"browser":     {"cmd", "path"},
	"man":         {"cmd", "path"},
	"sendemail":   {"smtpserver", "tocmd", "cccmd"},
	"pager":       nil, // pager.<command>: any
	"alias":       nil, // alias.<name>: "!" runs a shell
	"include":     {"path"},
	"includeif":   {"path"},
}

// cfgSetting is one variable set, by its full name, and its value.
type cfgSetting struct{ name, value string }

// runsCommand reports whether section.key is one git runs a program from,
// or one that sends git elsewhere for its code, config or hooks.
func runsCommand(section, key string) bool {
	keys, ok := commandKeys[section]
	return ok && (keys == nil || slices.Contains(keys, key))
}
