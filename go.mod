module github.com/aisb-dev/aisb

go 1.25.0

require golang.org/x/net v0.55.0

require golang.org/x/text v0.38.0 // indirect
