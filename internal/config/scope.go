package config

import (
	"fmt"
	"strings"
)

// StateScope is how widely a harness's state (settings, login, sessions)
// is shared between sandboxes.
type StateScope string

// The scopes, from narrowest to widest.
const (
	StateNone    StateScope = "none"    // an empty home every session
	StateProject StateScope = "project" // one volume per harness and project (default)
	StateHarness StateScope = "harness" // one volume per harness, for every project
)

// StateScopes lists the scopes from narrowest to widest.
var StateScopes = []StateScope{StateNone, StateProject, StateHarness}

// ParseStateScope checks a scope named in a file or on the command line.
func ParseStateScope(s string) (StateScope, error) {
	for _, x := range StateScopes {
		if string(x) == s {
			return x, nil
		}
	}
	return "", fmt.Errorf("%q is not a state scope; write one of %s", s, scopeList())
}

// width orders the scopes: an untrusted project file may only narrow.
func (s StateScope) width() int {
	for i, x := range StateScopes {
		if x == s {
			return i
		}
	}
	return len(StateScopes)
}

func scopeList() string {
	var q []string
	for _, s := range StateScopes {
		q = append(q, fmt.Sprintf("%q", s))
	}
	return strings.Join(q, ", ")
}
