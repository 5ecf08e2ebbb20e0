/* The one SDK header ring's C code includes, for `cargo check --target
 * x86_64-apple-darwin` on Linux (ci/cross.sh): a real Mac has Xcode's. */
#define TARGET_OS_MAC 1
#define TARGET_OS_OSX 1
#define TARGET_OS_IPHONE 0
