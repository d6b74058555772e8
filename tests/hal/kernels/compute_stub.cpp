namespace NAMESPACE {
void MAIN {}
}  // namespace NAMESPACE
