package allowlist

import "errors"

// ErrSSHAddress refuses an address or a network in the SSH list: SSH through
// the gate goes to names only.
var ErrSSHAddress = errors.New("address in the SSH list")

// ParseSSHList validates the hosts SSH may reach (network.ssh_hosts,
// --allow-ssh): the allowlist grammar, but names only. It returns the
// accepted entries and one error per refused entry, with Index set.
func ParseSSHList(entries []string) ([]Host, []*EntryError) {
	var names []string
	var idx []int
	var errs []*EntryError
	for i, s := range entries {
		h, err := parseHost(s)
		if err == nil && (h.IsAddr() || h.IsNet()) {
			err = refuse(ErrSSHAddress, "SSH goes to host names only, never to an address",
				"write the host's name, such as \"github.com\", and keep its key in ~/.ssh/known_hosts")
		}
		if err != nil {
			err.Entry, err.Index = s, i
			errs = append(errs, err)
			continue
		}
		names = append(names, s)
		idx = append(idx, i)
	}
	hosts, more := Parse(names)
	for _, e := range more {
		e.Index = idx[e.Index]
		if e.Kind == ErrDuplicate || e.Kind == ErrCovered {
			// Their messages name positions in the sub-list; say it again.
			e.Problem = "listed twice, or covered by a domain entry of the same list"
		}
		errs = append(errs, e)
	}
	sortErrors(errs)
	return hosts, errs
}
