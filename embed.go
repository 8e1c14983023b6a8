// Package aisb holds the sandbox image's Containerfile for the aisb command.
package aisb

import _ "embed"

// Containerfile builds the sandbox image (see image.Spec).
//
//go:embed Containerfile
var Containerfile []byte
