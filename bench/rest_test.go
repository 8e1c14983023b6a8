package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// restClient speaks Podman's libpod REST API on a unix socket, for
// measuring Podman's own calls (aisb's go through internal/engine).
type restClient struct {
	http *http.Client
}

func newRESTClient(b *testing.B, uri string) *restClient {
	b.Helper()
	sock, ok := strings.CutPrefix(uri, "unix://")
	if !ok {
		b.Fatalf("not a unix socket: %s", uri)
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	return &restClient{http: &http.Client{Transport: tr}}
}

func (c *restClient) do(ctx context.Context, method, path string, q url.Values, body any) error {
	var r io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(j)
	}
	return c.doBody(ctx, method, path, q, r)
}

func (c *restClient) doBody(ctx context.Context, method, path string, q url.Values, body io.Reader) error {
	_, err := c.call(ctx, method, path, q, body)
	return err
}

// call sends one request to the libpod API and returns the answer's body;
// a status of 300 or more is an error.
func (c *restClient) call(ctx context.Context, method, path string, q url.Values, body io.Reader) ([]byte, error) {
	u := "http://d/v5.0.0/libpod" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("%s %s: %s: %q", method, path, resp.Status, out)
	}
	return out, nil
}

// create creates the container id from the base image, without a
// network, running script with sh; extra adds to its spec.
func (c *restClient) create(ctx context.Context, id, script string, extra map[string]any) error {
	spec := map[string]any{"name": id, "image": testhost.BaseImage, "command": []string{"sh", "-c", script},
		"netns": map[string]string{"nsmode": "none"}}
	maps.Copy(spec, extra)
	return c.do(ctx, "POST", "/containers/create", nil, spec)
}

// copyIn extracts the tar archive into the container id at path.
func (c *restClient) copyIn(ctx context.Context, id, path string, archive []byte) error {
	return c.doBody(ctx, "PUT", "/containers/"+id+"/archive", url.Values{"path": {path}}, bytes.NewReader(archive))
}

// runContainer starts id, waits for it and fails unless it exited 0.
func (c *restClient) runContainer(ctx context.Context, id string) error {
	if err := c.do(ctx, "POST", "/containers/"+id+"/start", nil, nil); err != nil {
		return err
	}
	return c.waitContainer(ctx, id)
}

// waitContainer waits for id to exit and fails unless it exited 0.
func (c *restClient) waitContainer(ctx context.Context, id string) error {
	out, err := c.call(ctx, "POST", "/containers/"+id+"/wait", nil, nil)
	if err != nil {
		return err
	}
	if code := strings.TrimSpace(string(out)); code != "0" {
		return fmt.Errorf("wait %s: exit %q (a file missing or cut short: 3)", id, code)
	}
	return nil
}

func (c *restClient) removeContainer(id string) {
	c.do(context.Background(), "DELETE", "/containers/"+id, url.Values{"force": {"true"}}, nil)
}
