fn main() {
    println!("weir");
}
