package allowlist

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseHostAccepts(t *testing.T) {
	for _, s := range []string{
		"example.com",
		".example.com",
		"api.github.com",
		"a-b.c-d.example",
		"xn--bcher-kva.example",
		"1password.com",
		"192.0.2.10",
		"10.0.0.1", // refused at run time by the gate, but a valid entry
		"192.0.2.0/24",
		"198.51.100.8/29",
		strings.Repeat("a", 63) + ".example",
	} {
		h, err := ParseHost(s)
		if err != nil {
			t.Errorf("ParseHost(%q) = %v, want accepted", s, err)
			continue
		}
		if h.String() != s {
			t.Errorf("ParseHost(%q).String() = %q, want it unchanged", s, h.String())
		}
	}
}

func TestParseHostRefuses(t *testing.T) {
	tests := []struct {
		in      string
		kind    error
		wantMsg string // a substring of the message, naming the fix
	}{
		{"", ErrEmpty, "empty entry"},
		{"   ", ErrEmpty, "empty entry"},
		{".", ErrSyntax, "lone dot"},
		{"https://example.com", ErrScheme, `such as "example.com"`},
		{"http://user@Example.com:8080/x", ErrScheme, `"example.com"`},
		{"example.com:443", ErrPort, `write "example.com"`},
		{"example.com/path", ErrPath, `"example.com"`},
		{"example.com?q=1", ErrPath, "path or query"},
		{"*.example.com", ErrWildcard, `write ".example.com" for the domain and all its subdomains`},
		{"*", ErrWildcard, "wildcards"},
		{"Example.com", ErrUppercase, `write "example.com"`},
		{"bücher.example", ErrNonASCII, `"xn--bcher-kva.example"`},
		{"exa mple.com", ErrSpace, "whitespace"},
		{"example.com\nhttp_access allow all", ErrSpace, "control character"},
		{"example.com\t", ErrSpace, "whitespace"},
		{"\x00", ErrSpace, "control character"},
		{"::1", ErrIPv6, "IPv6"},
		{"[::ffff:127.0.0.1]", ErrIPv6, "IPv6"},
		{"fe80::1", ErrIPv6, "IPv6"},
		{"2130706433", ErrIPv4Form, `write "127.0.0.1"`},
		{"0x7f000001", ErrIPv4Form, `write "127.0.0.1"`},
		{"0177.0.0.1", ErrIPv4Form, `write "127.0.0.1"`},
		{"127.1", ErrIPv4Form, `write "127.0.0.1"`},
		{"0x7f.0.0.1", ErrIPv4Form, `write "127.0.0.1"`},
		{"1.2.3.4.5", ErrIPv4Form, "four decimal numbers"},
		{"256.1.1.1", ErrIPv4Form, "four decimal numbers"},
		{".192.0.2.1", ErrIPv4Form, "leading dot"},
		{"example.123", ErrSyntax, "last label is numeric"},
		{"localhost", ErrSyntax, "at least two labels"},
		{"example.com.", ErrSyntax, "trailing dot"},
		{"..example.com", ErrSyntax, "one leading dot"},
		{"a..example", ErrSyntax, "empty label"},
		{"-a.example", ErrSyntax, "hyphen"},
		{"a-.example", ErrSyntax, "hyphen"},
		{"under_score.example", ErrSyntax, "'_'"},
		{strings.Repeat("a", 64) + ".example", ErrSyntax, "longer than 63"},
		{"192.0.2.1/24", ErrIPv4Form, `write "192.0.2.0/24"`},
		{"192.0.2.7/32", ErrIPv4Form, `write "192.0.2.7"`},
		{"0.0.0.0/0", ErrIPv4Form, "wider than /8"},
		{"10.0.0.0/7", ErrIPv4Form, "wider than /8"},
		{"192.0.2.0/33", ErrIPv4Form, "not an IPv4 network"},
		{"010.0.0.0/8", ErrIPv4Form, "not an IPv4 network"},
		{"example.com/24", ErrPath, "path"},
		{strings.Repeat("abcdefghi.", 26) + "example", ErrSyntax, "more than 253"},
	}
	for _, tt := range tests {
		_, err := ParseHost(tt.in)
		if err == nil {
			t.Errorf("ParseHost(%q) accepted, want %v", tt.in, tt.kind)
			continue
		}
		if !errors.Is(err, tt.kind) {
			t.Errorf("ParseHost(%q) = %v, want kind %v", tt.in, err, tt.kind)
		}
		if !strings.Contains(err.Error(), tt.wantMsg) {
			t.Errorf("ParseHost(%q) = %q, want it to contain %q", tt.in, err.Error(), tt.wantMsg)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		in       []string
		want     []string
		wantErrs map[int]error
	}{
		{"clean", []string{"a.example", ".b.example", "192.0.2.1"}, []string{"a.example", ".b.example", "192.0.2.1"}, nil},
		{"duplicate", []string{"a.example", "a.example"}, []string{"a.example"}, map[int]error{1: ErrDuplicate}},
		{"covered after domain", []string{".example.com", "api.example.com"}, []string{".example.com"}, map[int]error{1: ErrCovered}},
		{"covered before domain", []string{"api.example.com", ".example.com"}, []string{".example.com"}, map[int]error{0: ErrCovered}},
		{"apex covered", []string{"example.com", ".example.com"}, []string{".example.com"}, map[int]error{0: ErrCovered}},
		{"nested domains", []string{".example.com", ".a.example.com"}, []string{".example.com"}, map[int]error{1: ErrCovered}},
		{"suffix is not a subdomain", []string{".example.com", "badexample.com"}, []string{".example.com", "badexample.com"}, nil},
		{"address in a network", []string{"192.0.2.0/24", "192.0.2.9"}, []string{"192.0.2.0/24"}, map[int]error{1: ErrCovered}},
		{"network in a network", []string{"192.0.2.0/26", "192.0.2.0/24"}, []string{"192.0.2.0/24"}, map[int]error{0: ErrCovered}},
		{"disjoint networks", []string{"192.0.2.0/25", "192.0.2.128/25"}, []string{"192.0.2.0/25", "192.0.2.128/25"}, nil},
		{"bad entry keeps index", []string{"ok.example", "*.x.example", "Bad.example"}, []string{"ok.example"}, map[int]error{1: ErrWildcard, 2: ErrUppercase}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hosts, errs := Parse(tt.in)
			var got []string
			for _, h := range hosts {
				got = append(got, h.String())
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("accepted %q, want %q", got, tt.want)
			}
			if len(errs) != len(tt.wantErrs) {
				t.Fatalf("errors %v, want %d", errs, len(tt.wantErrs))
			}
			for _, e := range errs {
				if want, ok := tt.wantErrs[e.Index]; !ok || !errors.Is(e, want) {
					t.Errorf("error %v at index %d, want %v", e, e.Index, tt.wantErrs[e.Index])
				}
			}
		})
	}
}

// FuzzParseHost: the validator never panics, an accepted entry renders
// unchanged and re-parses to the same Host, and nothing it accepts can carry a
// character that means something in squid.conf or nft syntax.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"example.com", ".example.com", "192.0.2.1", "0x7f.1", "a\nb", "[::1]", "ü.example", "*.x", "a:1", "192.0.2.0/24", "1.2.3.4/5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHost(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("empty error for %q", s)
			}
			return
		}
		if h.String() != s {
			t.Fatalf("accepted %q renders as %q", s, h.String())
		}
		again, err := ParseHost(h.String())
		if err != nil || again != h {
			t.Fatalf("re-parse of %q: %v, %v", s, again, err)
		}
		for _, c := range s {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '/' && h.IsNet()) {
				t.Fatalf("accepted %q with character %q", s, c)
			}
		}
	})
}

func TestAddAndNarrow(t *testing.T) {
	parse := func(in ...string) []Host {
		t.Helper()
		hs, errs := Parse(in)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return hs
	}
	list := parse("a.example", "b.example.com")
	got := Add(list, parse(".example.com")[0])
	if s := fmt.Sprint(got); s != "[a.example .example.com]" {
		t.Errorf("Add of a covering domain = %s", s)
	}
	if got := Add(got, parse("x.example.com")[0]); len(got) != 2 {
		t.Errorf("Add of a covered name grew the list: %v", got)
	}
	kept, dropped := Narrow(parse(".github.com", "a.example"), parse("api.github.com", "evil.example", "a.example"))
	if fmt.Sprint(kept) != "[api.github.com a.example]" || fmt.Sprint(dropped) != "[evil.example]" {
		t.Errorf("Narrow = %v, dropped %v", kept, dropped)
	}
}
