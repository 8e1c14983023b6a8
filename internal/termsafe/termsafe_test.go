package termsafe

import "testing"

func TestTermsafe(t *testing.T) {
	if got := Printable("a\x1b]0;x\x07é"); got != "a?]0;x???" {
		t.Errorf("Printable: %q", got)
	}
	if got := Lines("a\x1b\nb"); got != "a?\nb" {
		t.Errorf("Lines: %q", got)
	}
	if got := Name("/tmp/a\nb"); got != `"/tmp/a\nb"` {
		t.Errorf("Name: %q", got)
	}
	if got := Name("/tmp/ab"); got != "/tmp/ab" {
		t.Errorf("Name: %q", got)
	}
	if got, n := Content([]byte("x = 1\n\x1b[2J\té")); got != "x = 1\n\\x1b[2J\t\\xc3\\xa9" || n != 3 {
		t.Errorf("Content: %q %d", got, n)
	}
}
