/* C99 complex functions for Wine 8's ucrtbase, which exports them as unimplemented stubs.
 *
 * Part of the Wine prefix `make test-windows` makes (tests/windows/wine_prefix.py), not
 * of ShardChat: Windows 10 and 11 have all of these in ucrtbase.dll; Wine 8 has none,
 * and numpy 2 on Windows calls them from its first import. The prefix's ucrtbase.dll is
 * Wine's own, renamed, behind a proxy of that name that forwards every other function to
 * it and answers these with mingw-w64's libm.
 *
 * MSVC's complex types are structs (_Fcomplex, _Dcomplex, _Lcomplex: {T _Val[2]}), passed
 * and returned as the Windows x64 ABI passes structs: _Fcomplex (8 bytes) in a register,
 * _Dcomplex by reference. long double is double on MSVC, so _Lcomplex is _Dcomplex.
 */
#include <complex.h>
#include <stdint.h>

typedef struct { float v[2]; } fc;
typedef struct { double v[2]; } dc;

static inline float _Complex F(fc z) { return __builtin_complex(z.v[0], z.v[1]); }
static inline double _Complex D(dc z) { return __builtin_complex(z.v[0], z.v[1]); }
static inline fc toF(float _Complex z) { fc r = {{crealf(z), cimagf(z)}}; return r; }
static inline dc toD(double _Complex z) { dc r = {{creal(z), cimag(z)}}; return r; }

#define UNARY(name) \
    dc fix_##name(dc z) { return toD(name(D(z))); } \
    fc fix_##name##f(fc z) { return toF(name##f(F(z))); } \
    dc fix_##name##l(dc z) { return toD(name(D(z))); }
#define REAL(name) \
    double fix_##name(dc z) { return name(D(z)); } \
    float fix_##name##f(fc z) { return name##f(F(z)); } \
    double fix_##name##l(dc z) { return name(D(z)); }

UNARY(cacos) UNARY(cacosh) UNARY(casin) UNARY(casinh) UNARY(catan) UNARY(catanh)
UNARY(ccos) UNARY(ccosh) UNARY(cexp) UNARY(clog) UNARY(csin) UNARY(csinh) UNARY(csqrt)
UNARY(ctan) UNARY(ctanh) UNARY(conj) UNARY(cproj)
REAL(cabs) REAL(carg) REAL(cimag) REAL(creal)

dc fix_clog10(dc z) { return toD(clog(D(z)) / 2.302585092994045684); }
fc fix_clog10f(fc z) { return toF(clogf(F(z)) / 2.302585093f); }
dc fix_clog10l(dc z) { return fix_clog10(z); }
dc fix_cpow(dc x, dc y) { return toD(cpow(D(x), D(y))); }
fc fix_cpowf(fc x, fc y) { return toF(cpowf(F(x), F(y))); }
dc fix_cpowl(dc x, dc y) { return fix_cpow(x, y); }
double fix_norm(dc z) { double a = cabs(D(z)); return a * a; }
float fix_normf(fc z) { float a = cabsf(F(z)); return a * a; }
double fix_norml(dc z) { return fix_norm(z); }

/* MSVC's constructors and mixed products, which it uses in place of C99's operators */
dc fix__Cbuild(double re, double im) { dc r = {{re, im}}; return r; }
fc fix__FCbuild(float re, float im) { fc r = {{re, im}}; return r; }
dc fix__LCbuild(double re, double im) { return fix__Cbuild(re, im); }
dc fix__Cmulcc(dc x, dc y) { return toD(D(x) * D(y)); }
fc fix__FCmulcc(fc x, fc y) { return toF(F(x) * F(y)); }
dc fix__LCmulcc(dc x, dc y) { return fix__Cmulcc(x, y); }
dc fix__Cmulcr(dc x, double y) { return toD(D(x) * y); }
fc fix__FCmulcr(fc x, float y) { return toF(F(x) * y); }
dc fix__LCmulcr(dc x, double y) { return fix__Cmulcr(x, y); }
