package algo

// SegWindow is segWindow, for the cost tests of package algo_test.
const SegWindow = segWindow
