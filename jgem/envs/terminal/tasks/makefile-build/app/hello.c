#include <stdio.h>

int main(void) {
    printf("built with make\n");
    return 0;
}
