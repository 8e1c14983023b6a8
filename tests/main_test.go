package tests

import (
	"fmt"
	"os"
	"testing"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestMain builds each program the tests run (aisb, the entrypoint, the
// gate's helper, the probe) once for the package rather than once per
// test: some 5 s of relinking each time, and tests run side by side.
func TestMain(m *testing.M) {
	remove, err := testhost.ShareBuilds()
	if err != nil {
		fmt.Fprintf(os.Stderr, "share builds: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := removeDeferred(); err != nil {
		fmt.Fprintf(os.Stderr, "remove the build tests' images: %v\n", err)
		code = 1
	}
	remove()
	os.Exit(code)
}
