module github.com/lmlite/lmlite

go 1.26.8
