// Package layers holds the test that keeps aisb's packages in their floors: what must never import what.
package layers
