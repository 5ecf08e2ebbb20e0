/* Wine 8 (Debian 12) lacks bcryptprimitives.dll, whose ProcessPrng Rust's standard library
 * calls for random bytes on Windows. ci/cross.sh builds this stand-in beside each test
 * binary it runs under wine: the same bytes from RtlGenRandom, which wine has. Windows
 * itself has the real DLL; the library never ships this. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG chunk = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk)) return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
