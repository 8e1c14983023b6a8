package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/containers/podman/v5/pkg/errorhandling"
)

func TestIsNotFound(t *testing.T) {
	notFound := &errorhandling.ErrorModel{Message: "no such container", ResponseCode: 404}
	if !IsNotFound(notFound) || !IsNotFound(fmt.Errorf("remove x: %w", notFound)) {
		t.Error("a 404 from the service is not recognised")
	}
	// Matched by status, never by text.
	for _, err := range []error{nil, errors.New("no such container"), &errorhandling.ErrorModel{Message: "not found", ResponseCode: 500}} {
		if IsNotFound(err) {
			t.Errorf("IsNotFound(%v) = true", err)
		}
	}
}
