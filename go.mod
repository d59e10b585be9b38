module github.com/lmlite/lmlite

go 1.26.8

require (
	github.com/cockroachdb/datadriven v1.0.3
	github.com/dlclark/regexp2 v1.12.0
)

require github.com/pmezard/go-difflib v1.0.0 // indirect
