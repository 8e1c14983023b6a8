// Package tests holds aisb's integration tests: real rootless containers, a real
// gate and real kernel tables, aimed only at loopback and the test upstream.
package tests

import (
	"slices"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestHostSmoke proves the test host itself: as the test user, a rootless
// container with no sandbox reaches the upstream's 80, 443, 22 and 53 directly,
// under both network helpers. Every block test of the suite pairs with this.
func TestHostSmoke(t *testing.T) {
	parallel(t)
	testhost.Require(t)
	probe := testhost.Binary(t, "tests/probe")
	up := testhost.UpstreamAddr
	for _, helper := range []string{"pasta", "slirp4netns"} {
		t.Run(helper, func(t *testing.T) {
			mark := testhost.DNSMark(t)
			for _, c := range [][]string{
				{"tcp", up + ":80"},
				{"http", "http://" + up + "/"},
				{"tcp", up + ":443"},
				{"http", "https://" + up + "/"},
				{"tcp", up + ":22"},
				{"dns", up, "allowed.test"},
				{"udp", up + ":9999"},
			} {
				r := testhost.Podman(t, append([]string{"run", "--rm", "--network=" + helper,
					"-v", probe + ":/probe:ro", testhost.BaseImage, "/probe"}, c...)...)
				if r.Code != 0 {
					t.Errorf("probe %v from a plain %s container: %s", c, helper, r)
					continue
				}
				t.Logf("probe %v: %s", c, strings.TrimSpace(r.Stdout))
			}
			if q := testhost.DNSQueries(t, mark); !slices.Contains(q, "allowed.test") {
				t.Errorf("the upstream's DNS log lacks the query; it has %q", q)
			}
		})
	}
}
