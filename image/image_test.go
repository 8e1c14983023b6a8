package image

import "testing"

// TestTag: the same inputs give the same tag; any change to any input gives
// another, so a changed input always rebuilds and an unchanged one never does.
func TestTag(t *testing.T) {
	base := Spec{Name: "aisb-x", Containerfile: []byte("FROM x"), Files: map[string][]byte{"a": []byte("1")}, BaseImage: "b", Args: map[string]string{"K": "v"}, Inputs: []string{"i"}}
	same := base
	if base.Tag("id") != same.Tag("id") {
		t.Fatal("same inputs, different tags")
	}
	variants := map[string]Spec{}
	v := base
	v.Containerfile = []byte("FROM y")
	variants["containerfile"] = v
	v = base
	v.Files = map[string][]byte{"a": []byte("2")}
	variants["file content"] = v
	v = base
	v.Files = map[string][]byte{"b": []byte("1")}
	variants["file name"] = v
	v = base
	v.Args = map[string]string{"K": "w"}
	variants["arg"] = v
	v = base
	v.Inputs = []string{"j"}
	variants["input"] = v
	for name, s := range variants {
		if s.Tag("id") == base.Tag("id") {
			t.Errorf("changing the %s keeps the tag", name)
		}
	}
	if base.Tag("id2") == base.Tag("id") {
		t.Error("changing the base image ID keeps the tag")
	}
}
