module github.com/lmlite/lmlite

go 1.26.8

require github.com/dlclark/regexp2 v1.12.0 // indirect
